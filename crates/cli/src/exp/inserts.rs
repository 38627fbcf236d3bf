//! `islands experiment inserts`: insert-only clients with private tables: one shared log
//! against a log per island, log on and off, by clients (Xi et al.).
//! Its points, the paper's claim and the verdict on what this machine showed.

use super::sweep::{Measured, Point, Sample};
use super::{at, check_cores, islands_of, panels_of, point, s, Ctx, Experiment, Findings};

pub const EXPERIMENT: Experiment = Experiment {
    name: "inserts",
    figure: "Xi et al., Figs. 1-5",
    claim: "Insert-only clients with private tables: with one shared log, log writing is the bottleneck as clients grow; an instance (and log) per client group removes it; with the log off, both scale.",
    x_label: "clients",
    y_label: "K txn/s",
    cost: false,
    phases: false,
    points,
    verdict,
};

fn points(c: &Ctx) -> Result<Vec<Point>, String> {
    let k = c.k;
    let mut v = Vec::new();
    let clients = c.xs_up_to_k();
    for &x in &clients {
        let kk = check_cores(x, k)?;
        for (log, dur) in [("log on (sync)", c.durability.as_str()), ("log off", "off")] {
            for (label, d) in [
                ("one shared log (1 island)", islands_of(&c.m, kk, 1)),
                ("a log per island (1 per client)", islands_of(&c.m, kk, kk)),
            ] {
                v.push(point(
                    log.to_string(),
                    label,
                    x,
                    &[d.args(), s(&["--durability", dur, "inserts"])],
                ));
            }
        }
    }
    Ok(v)
}

fn verdict(measured: &[Measured], k: usize, f: &mut Findings) {
    let Findings {
        observed: obs,
        caveats: cav,
        checks: ok,
    } = f;
    let tput = |s: &Sample| s.throughput_tps / 1e3;
    let x = k as f64;
    for panel in panels_of(measured) {
        if let (Some(shared), Some(per)) = (
            at(measured, &panel, "one shared log (1 island)", x, &tput),
            at(
                measured,
                &panel,
                "a log per island (1 per client)",
                x,
                &tput,
            ),
        ) {
            obs.push(format!("{panel}, {k} clients: one shared log {shared:.1} K, a log per island {per:.1} K ({:.2}x)", per / shared));
            if panel.starts_with("log on") && k > 1 {
                ok.push(per > shared);
            }
        }
    }
    cav.push("Xi et al. measured up to 64 clients on a 4-socket machine with separate log devices; here every log shares one virtual disk".into());
}
