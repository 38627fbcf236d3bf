//! `islands experiment skew`: Zipfian skew θ 0-0.99 at 0/20/50% multisite, read and
//! update, fine, coarse and one island (paper Fig. 13).
//! Its points, the paper's claim and the verdict on what this machine showed.

use super::sweep::{Measured, Point};
use super::{
    dedup_deployments, islands_of, micro, mode_name, num, per_socket, point, throughput_ends, Ctx,
    Experiment, Findings,
};

pub const EXPERIMENT: Experiment = Experiment {
    name: "skew",
    figure: "paper Fig. 13",
    claim: "As Zipfian skew grows, shared-everything suffers from contention (mostly for updates) and fine-grained islands from one overloaded island that slows the others; coarse-grained islands cope best.",
    x_label: "skew θ",
    y_label: "K txn/s",
    cost: false,
    phases: false,
    points,
    verdict,
};

fn points(c: &Ctx) -> Result<Vec<Point>, String> {
    let k = c.k;
    let mut v = Vec::new();
    let xs = c.xs(&[0.0, 0.25, 0.5, 0.75, 0.99], &[0.0, 0.5, 0.99]);
    let pcts: &[f64] = if c.quick {
        &[0.0, 50.0]
    } else {
        &[0.0, 20.0, 50.0]
    };
    // One island before coarse-grained ones: on one socket they are the
    // same deployment, and the one kept is named 1ISL, which the verdict
    // checks.
    let mut deps = vec![
        islands_of(&c.m, k, k),
        islands_of(&c.m, k, 1),
        per_socket(&c.m, k),
    ];
    deps[0].label = format!("{k}ISL (fine)");
    deps[1].label = "1ISL".into();
    dedup_deployments(&mut deps);
    for &u in &c.modes {
        for &pct in pcts {
            for d in &deps {
                for &x in &xs {
                    if !(0.0..1.0).contains(&x) {
                        return Err(format!(
                            "--x {x}: a skew θ must be at least 0 and less than 1"
                        ));
                    }
                    v.push(point(
                        format!("{} 2 rows, {}% multisite", mode_name(u), num(pct)),
                        &d.label,
                        x,
                        &[d.args(), c.mode_args(u), micro(u, 2, pct, x)],
                    ));
                }
            }
        }
    }
    Ok(v)
}

fn verdict(measured: &[Measured], _k: usize, f: &mut Findings) {
    for e in throughput_ends(measured) {
        f.observed
            .push(e.said(&format!("θ={}", num(e.lo)), &format!("θ={}", num(e.hi))));
        if e.series.starts_with("1ISL") && e.panel.starts_with("update") && e.hi >= 0.9 {
            f.checks.push(e.b < e.a);
        }
    }
}
