//! `islands experiment multisite`: reading or updating 10 rows, throughput by share of
//! multisite transactions, for 1ISL … NISL (paper Fig. 9).
//! Its points, the paper's claim and the verdict on what this machine showed.

use super::sweep::{Measured, Point, Sample};
use super::{
    at, check_pct, divisors, islands_of, micro, mode_name, num, panels_of, point, xs_of, Ctx,
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
    let Findings {
        observed: obs,
        checks: ok,
        ..
    } = f;
    let tput = |s: &Sample| s.throughput_tps / 1e3;
    let fine = format!("{k}ISL");
    for panel in panels_of(measured) {
        let xs = xs_of(measured, &panel);
        let (Some(&lo), Some(&hi)) = (xs.first(), xs.last()) else {
            continue;
        };
        for series in ["1ISL", fine.as_str()] {
            if let (Some(a), Some(b)) = (
                at(measured, &panel, series, lo, &tput),
                at(measured, &panel, series, hi, &tput),
            ) {
                obs.push(format!(
                    "{panel}, {series}: {a:.1} K at {}% -> {b:.1} K at {}% multisite ({:.2}x)",
                    num(lo),
                    num(hi),
                    b / a
                ));
                if k > 1 && lo == 0.0 && hi == 100.0 {
                    ok.push(if series == "1ISL" {
                        b / a > 0.8
                    } else {
                        b / a < 0.8
                    });
                }
            }
        }
    }
}
