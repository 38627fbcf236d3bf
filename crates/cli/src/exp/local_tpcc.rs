//! `islands experiment local-tpcc`: TPC-C Payment, local only: fine-grained islands against
//! shared-everything, by active cores (paper Fig. 7).
//! Its points, the paper's claim and the verdict on what this machine showed.

use super::sweep::{Measured, Point, Sample};
use super::{at, check_cores, islands_of, point, s, Ctx, Experiment, Findings};

pub const EXPERIMENT: Experiment = Experiment {
    name: "local-tpcc",
    figure: "paper Fig. 7",
    claim: "TPC-C Payment with only local transactions: fine-grained shared-nothing (one island per core) is 4.5x faster than shared-everything on 24 cores, mostly from contention on the Warehouse table.",
    x_label: "active cores",
    y_label: "K txn/s",
    cost: false,
    phases: false,
    points,
    verdict,
};

fn points(c: &Ctx) -> Result<Vec<Point>, String> {
    let k = c.k;
    let mut v = Vec::new();
    let cores = c.xs_up_to_k();
    for x in cores {
        let kk = check_cores(x, k)?;
        for (label, d) in [
            ("fine-grained (1 island per core)", islands_of(&c.m, kk, kk)),
            ("shared-everything (1 island)", islands_of(&c.m, kk, 1)),
        ] {
            v.push(point(
                "TPC-C Payment, local only".into(),
                label,
                x,
                &[d.args(), s(&["tpcc", "--mix", "payment", "--local-only"])],
            ));
        }
    }
    Ok(v)
}

fn verdict(measured: &[Measured], k: usize, f: &mut Findings) {
    let Findings {
        observed: obs,
        checks: ok,
        ..
    } = f;
    let tput = |s: &Sample| s.throughput_tps / 1e3;
    let p = "TPC-C Payment, local only";
    let x = k as f64;
    if let (Some(fg), Some(se)) = (
        at(measured, p, "fine-grained (1 island per core)", x, &tput),
        at(measured, p, "shared-everything (1 island)", x, &tput),
    ) {
        obs.push(format!("at {k} cores fine-grained {fg:.1} K txn/s vs shared-everything {se:.1} K: {:.2}x (paper: 4.5x on 24 cores)", fg / se));
        ok.push(fg > se * 1.05);
    }
}
