//! `islands experiment multisite`: reading or updating 10 rows, throughput by share of
//! multisite transactions, for 1ISL … NISL (paper Fig. 9).
//! Its points, the paper's claim and the verdict on what this machine showed.

use super::sweep::{Measured, Point};
use super::{
    check_pct, divisors, islands_of, micro, mode_name, num, point, throughput_ends, Ctx,
    Experiment, Findings,
};

pub const EXPERIMENT: Experiment = Experiment {
    name: "multisite",
    figure: "paper Fig. 9",
    claim: "Reading or updating 10 rows: shared-everything (1ISL) is not affected by the share of multisite transactions; shared-nothing deployments lose throughput as it grows, the fine-grained ones most.",
    x_label: "% multisite transactions",
    y_label: "K txn/s",
    cost: false,
    phases: false,
    points,
    verdict,
};

fn points(c: &Ctx) -> Result<Vec<Point>, String> {
    let k = c.k;
    let mut v = Vec::new();
    let xs = c.xs(&[0.0, 20.0, 40.0, 60.0, 80.0, 100.0], &[0.0, 50.0, 100.0]);
    for &u in &c.modes {
        for d in divisors(k) {
            let dep = islands_of(&c.m, k, d);
            for &x in &xs {
                check_pct(x)?;
                v.push(point(
                    format!("{} 10 rows", mode_name(u)),
                    &dep.label,
                    x,
                    &[dep.args(), c.mode_args(u), micro(u, 10, x, 0.0)],
                ));
            }
        }
    }
    Ok(v)
}

fn verdict(measured: &[Measured], k: usize, f: &mut Findings) {
    let fine = format!("{k}ISL");
    for e in throughput_ends(measured) {
        let one = e.series == "1ISL";
        if !one && e.series != fine {
            continue;
        }
        f.observed.push(e.said(
            &format!("{}%", num(e.lo)),
            &format!("{}% multisite", num(e.hi)),
        ));
        if k > 1 && e.lo == 0.0 && e.hi == 100.0 {
            f.checks.push(if one {
                e.b / e.a > 0.8
            } else {
                e.b / e.a < 0.8
            });
        }
    }
}
