//! `islands experiment breakdown`: the time of a 4-row transaction split into execution,
//! transaction management, communication, locking and logging at 0/50/100%
//! multisite (paper Fig. 11).
//! Its points, the paper's claim and the verdict on what this machine showed.

use super::sweep::{Measured, Point};
use super::{
    check_pct, islands_of, micro, mode_name, panels_of, phase, point, s, Ctx, Experiment, Findings,
};

pub const EXPERIMENT: Experiment = Experiment {
    name: "breakdown",
    figure: "paper Fig. 11",
    claim: "For a 4-row transaction, communication dominates the extra cost of distributed read-only transactions; for updates the overhead splits between communication and additional logging.",
    x_label: "% multisite transactions",
    y_label: "time per transaction (us)",
    cost: false,
    phases: true,
    points,
    verdict,
};

fn points(c: &Ctx) -> Result<Vec<Point>, String> {
    let mut v = Vec::new();
    let xs = c.xs(&[0.0, 50.0, 100.0], &[0.0, 50.0, 100.0]);
    let dep = islands_of(&c.m, c.k, c.k);
    for &u in &c.modes {
        for &x in &xs {
            check_pct(x)?;
            v.push(point(
                format!("{} 4 rows", mode_name(u)),
                &dep.label,
                x,
                &[
                    dep.args(),
                    c.mode_args(u),
                    s(&["--phases"]),
                    micro(u, 4, x, 0.0),
                ],
            ));
        }
    }
    Ok(v)
}

fn verdict(measured: &[Measured], _k: usize, f: &mut Findings) {
    let Findings {
        observed: obs,
        caveats: cav,
        checks: ok,
    } = f;
    for panel in panels_of(measured) {
        let c0 = phase(measured, &panel, 0.0, "communication");
        let c1 = phase(measured, &panel, 100.0, "communication");
        if let (Some(c0), Some(c1)) = (c0, c1) {
            obs.push(format!(
                "{panel}: communication {c0:.2} us at 0% -> {c1:.2} us at 100% multisite"
            ));
            ok.push(c1 > c0);
        }
        if panel.starts_with("update") {
            let l0 = phase(measured, &panel, 0.0, "logging");
            let l1 = phase(measured, &panel, 100.0, "logging");
            if let (Some(l0), Some(l1)) = (l0, l1) {
                obs.push(format!(
                    "{panel}: logging {l0:.2} us at 0% -> {l1:.2} us at 100% multisite"
                ));
                ok.push(l1 > l0);
            }
        }
    }
    if measured
        .iter()
        .all(|m| m.samples.iter().all(|s| s.phases.is_empty()))
    {
        cav.push("the bench reports carried no phase counters".into());
    }
}
