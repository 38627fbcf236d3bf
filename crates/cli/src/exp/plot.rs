//! Figures of the experiments, drawn with plotters into SVG and PNG. The font
//! (DejaVu Sans, its licence beside it in `assets/`) is compiled into the binary
//! and registered as "sans-serif", so drawing works on a machine without fonts.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

const FONT: &str = "sans-serif";

fn register_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font(
            FONT,
            FontStyle::Normal,
            include_bytes!("../../assets/DejaVuSans.ttf"),
        )
        .map_err(|_| "the bundled font does not parse".to_string())
    })
    .clone()
}

/// One line of a panel: (x, median, low, high) per point.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64, f64, f64)>,
}

pub struct LinePanel {
    pub title: String,
    pub series: Vec<Series>,
}

/// A figure of line panels side by side (up to 3 per row).
pub struct LineFigure {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub panels: Vec<LinePanel>,
}

/// One stacked bar: its label and the height of each segment (in `segments` order).
pub struct Bar {
    pub label: String,
    pub values: Vec<f64>,
}

pub struct BarPanel {
    pub title: String,
    pub bars: Vec<Bar>,
}

/// Stacked bars in panels (the time breakdown).
pub struct BarFigure {
    pub title: String,
    pub y_label: String,
    pub segments: Vec<String>,
    pub panels: Vec<BarPanel>,
}

pub enum Figure {
    Lines(LineFigure),
    Bars(BarFigure),
}

fn grid(n: usize) -> (usize, usize) {
    let cols = n.clamp(1, 3);
    (n.div_ceil(cols).max(1), cols)
}

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("cannot draw the figure: {e}")
}

/// An axis label without needless decimals.
fn short(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else if v.abs() >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn color(i: usize) -> RGBColor {
    // Distinguishable on white, and in grey print by lightness.
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    C[i % C.len()]
}

fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    f: &LineFigure,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let body = root.titled(&f.title, (FONT, 22)).map_err(err)?;
    let (rows, cols) = grid(f.panels.len());
    let areas = body.split_evenly((rows, cols));
    for (area, p) in areas.iter().zip(&f.panels) {
        let pts = p.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
        for &(x, _, _, hi) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(hi);
        }
        if !x0.is_finite() {
            continue;
        }
        if x1 <= x0 {
            x0 -= 1.0;
            x1 += 1.0;
        }
        let pad = (x1 - x0) * 0.04;
        let y1 = if y1 > 0.0 { y1 * 1.12 } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, (FONT, 16))
            .margin(12)
            .x_label_area_size(38)
            .y_label_area_size(60)
            .build_cartesian_2d((x0 - pad)..(x1 + pad), 0f64..y1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(&f.x_label)
            .y_desc(&f.y_label)
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&|v| short(*v))
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(err)?;
        for (i, s) in p.series.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().map(|&(x, m, _, _)| (x, m)),
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart
                .draw_series(
                    s.points
                        .iter()
                        .map(|&(x, m, _, _)| Circle::new((x, m), 3, c.filled())),
                )
                .map_err(err)?;
            chart
                .draw_series(
                    s.points
                        .iter()
                        .map(|&(x, m, lo, hi)| ErrorBar::new_vertical(x, lo, m, hi, c, 6)),
                )
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)
}

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &BarFigure) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let body = root.titled(&f.title, (FONT, 22)).map_err(err)?;
    let (rows, cols) = grid(f.panels.len());
    let areas = body.split_evenly((rows, cols));
    for (area, p) in areas.iter().zip(&f.panels) {
        let n = p.bars.len();
        let top = p
            .bars
            .iter()
            .map(|b| b.values.iter().filter(|v| v.is_finite()).sum::<f64>())
            .fold(0f64, f64::max);
        let top = if top > 0.0 { top * 1.3 } else { 1.0 };
        let labels: Vec<String> = p.bars.iter().map(|b| b.label.clone()).collect();
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, (FONT, 16))
            .margin(12)
            .x_label_area_size(38)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n.max(1))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .y_desc(&f.y_label)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(err)?;
        for (si, seg) in f.segments.iter().enumerate() {
            let c = color(si);
            let rects: Vec<Rectangle<(f64, f64)>> = p
                .bars
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let base: f64 = b.values[..si].iter().filter(|v| v.is_finite()).sum();
                    let h = b
                        .values
                        .get(si)
                        .copied()
                        .filter(|v| v.is_finite())
                        .unwrap_or(0.0);
                    let x = i as f64;
                    Rectangle::new([(x - 0.3, base), (x + 0.3, base + h)], c.filled())
                })
                .collect();
            chart
                .draw_series(rects)
                .map_err(err)?
                .label(seg.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)
}

fn size(f: &Figure) -> (u32, u32) {
    let n = match f {
        Figure::Lines(l) => l.panels.len(),
        Figure::Bars(b) => b.panels.len(),
    };
    let (rows, cols) = grid(n);
    (80 + 440 * cols as u32, 60 + 340 * rows as u32)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &Figure) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    match f {
        Figure::Lines(l) => draw_lines(root, l),
        Figure::Bars(b) => draw_bars(root, b),
    }
}

/// Draws `f` as `stem.svg` and `stem.png`; returns both paths.
pub fn save(f: &Figure, stem: &Path) -> Result<(PathBuf, PathBuf), String> {
    register_font()?;
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    let dims = size(f);
    {
        let root = SVGBackend::new(&svg, dims).into_drawing_area();
        draw(&root, f)?;
    }
    {
        let root = BitMapBackend::new(&png, dims).into_drawing_area();
        draw(&root, f)?;
    }
    Ok((svg, png))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_lines_and_bars_with_the_bundled_font() {
        let dir = std::env::temp_dir().join(format!("islands-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lines = Figure::Lines(LineFigure {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            panels: vec![LinePanel {
                title: "read".into(),
                series: vec![Series {
                    name: "1ISL".into(),
                    points: vec![(0.0, 1.0, 0.9, 1.1), (50.0, 2.0, 1.8, 2.1)],
                }],
            }],
        });
        let (svg, png) = save(&lines, &dir.join("lines")).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("1ISL"));
        let head = std::fs::read(&png).unwrap();
        assert_eq!(&head[1..4], b"PNG");
        let bars = Figure::Bars(BarFigure {
            title: "b".into(),
            y_label: "us".into(),
            segments: vec!["execution".into(), "logging".into()],
            panels: vec![BarPanel {
                title: "update".into(),
                bars: vec![Bar {
                    label: "0%".into(),
                    values: vec![1.0, 2.0],
                }],
            }],
        });
        let (svg, _) = save(&bars, &dir.join("bars")).unwrap();
        assert!(std::fs::read_to_string(svg).unwrap().contains("logging"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
