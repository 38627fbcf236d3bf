//! `islands experiment cost`: cost per transaction by rows touched (2-100), local and
//! multisite, read and update, per deployment (paper Fig. 10).
//! Its points, the paper's claim and the verdict on what this machine showed.

use super::sweep::{Measured, Point, Sample};
use super::{
    at, check_rows, divisors, islands_of, micro, mode_name, num, panels_of, point, xs_of, Ctx,
    Experiment, Findings,
};

pub const EXPERIMENT: Experiment = Experiment {
    name: "cost",
    figure: "paper Fig. 10",
    claim: "Local transactions cost least on the finest islands (single-threaded, no locks); multisite transactions cost most there, and less on coarser islands, because fewer islands take part in each one.",
    x_label: "rows per transaction",
    y_label: "core time per transaction (us)",
    cost: true,
    phases: false,
    points,
    verdict,
};

fn points(c: &Ctx) -> Result<Vec<Point>, String> {
    let k = c.k;
    let mut v = Vec::new();
    let xs = c.xs(
        &[
            2.0, 4.0, 8.0, 12.0, 18.0, 24.0, 30.0, 40.0, 60.0, 80.0, 100.0,
        ],
        &[2.0, 10.0, 100.0],
    );
    for &u in &c.modes {
        for (kind, ms) in [("local", 0.0), ("multisite", 100.0)] {
            for d in divisors(k) {
                let dep = islands_of(&c.m, k, d);
                for &x in &xs {
                    let n = check_rows(x)?;
                    v.push(point(
                        format!("{kind} {}", mode_name(u)),
                        &dep.label,
                        x,
                        &[dep.args(), c.mode_args(u), micro(u, n, ms, 0.0)],
                    ));
                }
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
    let cost = |s: &Sample| s.cost_us;
    let fine = format!("{k}ISL");
    for panel in panels_of(measured) {
        let xs = xs_of(measured, &panel);
        let Some(&x) = xs.last() else { continue };
        if let (Some(one), Some(f)) = (
            at(measured, &panel, "1ISL", x, &cost),
            at(measured, &panel, &fine, x, &cost),
        ) {
            obs.push(format!(
                "{panel}, {} rows: 1ISL {one:.1} us, {fine} {f:.1} us per transaction",
                num(x)
            ));
            if k > 1 {
                ok.push(if panel.starts_with("local") {
                    f <= one * 1.05
                } else {
                    f > one
                });
            }
        }
    }
}
