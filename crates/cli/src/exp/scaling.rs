//! `islands experiment scaling`: 20% multisite, throughput by active cores, fine-grained,
//! coarse-grained and shared-everything (paper Fig. 12).
//! Its points, the paper's claim and the verdict on what this machine showed.

use super::sweep::{Measured, Point};
use super::{
    check_cores, islands_of, micro, mode_name, num, per_socket, point, throughput_ends, Ctx,
    Experiment, Findings,
};

pub const EXPERIMENT: Experiment = Experiment {
    name: "scaling",
    figure: "paper Fig. 12",
    claim: "At 20% multisite, shared-nothing deployments scale linearly with the active cores and coarse-grained islands are competitive with the best; shared-everything does not scale linearly on many sockets.",
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
    for &u in &c.modes {
        for &x in &cores {
            let kk = check_cores(x, k)?;
            let mut deps = vec![
                ("FG (1 island per core)", islands_of(&c.m, kk, kk)),
                ("CG (1 island per socket)", per_socket(&c.m, kk)),
                ("SE (1 island)", islands_of(&c.m, kk, 1)),
            ];
            // On one socket CG is SE: run it once (the notes say so).
            if deps[1].1.groups == deps[2].1.groups {
                deps.remove(1);
            }
            for (label, d) in deps {
                v.push(point(
                    format!("{} 10 rows, 20% multisite", mode_name(u)),
                    label,
                    x,
                    &[d.args(), c.mode_args(u), micro(u, 10, 20.0, 0.0)],
                ));
            }
        }
    }
    Ok(v)
}

fn verdict(measured: &[Measured], _k: usize, f: &mut Findings) {
    for e in throughput_ends(measured) {
        f.observed
            .push(e.said(&format!("{} core(s)", num(e.lo)), &num(e.hi)));
        if e.series.starts_with("FG") && e.hi > e.lo {
            f.checks.push(e.b > e.a * 1.2);
        }
    }
    f.caveats.push("the paper's point is on 24 and 80 cores of 4 and 8 sockets; 2 cores show only the first step".into());
}
