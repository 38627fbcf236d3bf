//! Pictures of a topology: a text tree, and a hand-written SVG with the
//! islands of a plan coloured in.

use std::fmt::Write as _;

use super::{plural, CpuId, CpuSet, Topology};

/// What a picture shows of a deployment on the machine: its title, and per
/// island the CPUs it is pinned to (`None`: not pinned) and its legend line.
/// A deployment plan describes itself this way (`deploy::Plan::marks`).
#[derive(Clone, Debug, Default)]
pub struct Marks {
    pub title: String,
    pub islands: Vec<(Option<CpuSet>, String)>,
}

struct Node {
    label: String,
    children: Vec<Node>,
}

fn write_tree(out: &mut String, nodes: &[Node], prefix: &str) {
    for (i, n) in nodes.iter().enumerate() {
        let last = i + 1 == nodes.len();
        out.push_str(prefix);
        out.push_str(if last { "└─ " } else { "├─ " });
        out.push_str(&n.label);
        out.push('\n');
        let deeper = format!("{prefix}{}", if last { "   " } else { "│  " });
        write_tree(out, &n.children, &deeper);
    }
}

impl Topology {
    /// The machine as a text tree: socket → NUMA node → L3 → core → CPUs.
    pub fn render_tree(&self) -> String {
        let mut out = format!("machine {} ({})\n", self.name, self.summary());
        let sockets: Vec<Node> = self
            .sockets
            .iter()
            .map(|s| Node {
                label: format!("socket {} (cpus {})", s.index, s.cpus),
                children: s
                    .numa
                    .iter()
                    .map(|&n| Node {
                        label: format!(
                            "NUMA node {} (cpus {})",
                            self.numa[n].os_id,
                            self.numa[n].cpus.intersection(&s.cpus)
                        ),
                        children: s.l3s.iter().filter_map(|&l| self.l3_node(l, n)).collect(),
                    })
                    .collect(),
            })
            .collect();
        write_tree(&mut out, &sockets, "");
        out
    }

    /// The L3 domain `l` restricted to NUMA node `n`, or `None` if they share no core.
    fn l3_node(&self, l: usize, n: usize) -> Option<Node> {
        let cores: Vec<Node> = self.l3s[l]
            .cores
            .iter()
            .map(|&c| &self.cores[c])
            .filter(|c| c.numa == n)
            .map(|c| {
                let denied: Vec<String> = c
                    .cpus
                    .iter()
                    .filter(|&cpu| !self.is_allowed(cpu))
                    .map(|cpu| cpu.to_string())
                    .collect();
                let word = if c.cpus.len() == 1 { "cpu" } else { "cpus" };
                let mut label = format!("core {}: {word} {}", c.index, c.cpus);
                if !denied.is_empty() {
                    label.push_str(&format!(" (not allowed: {})", denied.join(",")));
                }
                Node {
                    label,
                    children: Vec::new(),
                }
            })
            .collect();
        if cores.is_empty() {
            return None;
        }
        Some(Node {
            label: format!("L3 {} ({})", l, plural(cores.len(), "core")),
            children: cores,
        })
    }

    /// An SVG picture: sockets as boxes holding L3 domains holding cores, each
    /// hardware thread labelled with its CPU id and filled with the colour of
    /// the island it is pinned to. CPUs not allowed are grey.
    pub fn render_svg(&self, plan: Option<&Marks>) -> String {
        const CPU_W: usize = 34;
        const CPU_H: usize = 22;
        const CORE_PAD: usize = 3;
        const GAP: usize = 6;
        const PAD: usize = 10;
        const HEAD: usize = 20;
        const CORES_PER_ROW: usize = 6;
        const SOCKETS_PER_ROW: usize = 4;

        let island_of = |cpu: CpuId| -> Option<usize> {
            plan?
                .islands
                .iter()
                .position(|(cpus, _)| cpus.as_ref().is_some_and(|set| set.contains(cpu)))
        };
        let threads = self.threads_per_core_max().max(1);
        let core_w = threads * CPU_W + 2 * CORE_PAD;
        let core_h = CPU_H + 2 * CORE_PAD;
        let cols = |n: usize| n.clamp(1, CORES_PER_ROW);
        let l3_w = |n: usize| 2 * PAD + cols(n) * core_w + (cols(n) - 1) * GAP;
        let l3_h = |n: usize| HEAD + PAD + n.div_ceil(CORES_PER_ROW).max(1) * (core_h + GAP);
        let socket_w = self
            .l3s
            .iter()
            .map(|l| l3_w(l.cores.len()))
            .max()
            .unwrap_or(0)
            + 2 * PAD;
        let socket_h = self
            .sockets
            .iter()
            .map(|s| {
                HEAD + PAD
                    + s.l3s
                        .iter()
                        .map(|&l| l3_h(self.l3s[l].cores.len()) + GAP)
                        .sum::<usize>()
            })
            .max()
            .unwrap_or(0);
        let scols = self.sockets.len().clamp(1, SOCKETS_PER_ROW);
        let srows = self.sockets.len().div_ceil(SOCKETS_PER_ROW).max(1);
        let title_h = 34;
        let legend_rows = plan.map_or(0, |p| p.islands.len()) + 2;
        debug_assert_eq!(legend_rows, legend_entries(plan).len());
        let title = match plan {
            Some(p) => p.title.clone(),
            None => format!("machine {} ({})", self.name, self.summary()),
        };
        let legend: Vec<(String, String)> = legend_entries(plan);
        // Text is not measured by SVG; 8 px per character is enough for 11–14 px sans.
        let text_w = legend
            .iter()
            .map(|(_, t)| t.chars().count() * 7 + 30)
            .chain([title.chars().count() * 8])
            .max()
            .unwrap_or(0);
        let width = (PAD + scols * (socket_w + PAD)).max(text_w + 2 * PAD);
        let legend_y = title_h + srows * (socket_h + PAD) + PAD;
        let height = legend_y + legend_rows * 18 + PAD;

        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="11">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{PAD}" y="22" font-size="14" font-weight="bold">{}</text>"#,
            escape(&title)
        );
        for s in &self.sockets {
            let sx = PAD + (s.index % SOCKETS_PER_ROW) * (socket_w + PAD);
            let sy = title_h + (s.index / SOCKETS_PER_ROW) * (socket_h + PAD);
            let _ = writeln!(
                svg,
                r##"<rect x="{sx}" y="{sy}" width="{socket_w}" height="{socket_h}" rx="6" fill="#f4f4f4" stroke="#333" stroke-width="1.5"/>"##
            );
            let nodes: Vec<String> = s
                .numa
                .iter()
                .map(|&n| self.numa[n].os_id.to_string())
                .collect();
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" font-weight="bold">socket {} · NUMA node {}</text>"#,
                sx + PAD,
                sy + 15,
                s.index,
                nodes.join(",")
            );
            let mut ly = sy + HEAD + PAD / 2;
            for &l in &s.l3s {
                let dom = &self.l3s[l];
                let (w, h) = (l3_w(dom.cores.len()), l3_h(dom.cores.len()));
                let lx = sx + PAD;
                let _ = writeln!(
                    svg,
                    r##"<rect x="{lx}" y="{ly}" width="{w}" height="{h}" rx="4" fill="#e6e9ef" stroke="#778"/>"##
                );
                let _ = writeln!(
                    svg,
                    r#"<text x="{}" y="{}">L3 {l}</text>"#,
                    lx + PAD,
                    ly + 14
                );
                for (k, &c) in dom.cores.iter().enumerate() {
                    let cx = lx + PAD + (k % CORES_PER_ROW) * (core_w + GAP);
                    let cy = ly + HEAD + (k / CORES_PER_ROW) * (core_h + GAP);
                    let _ = writeln!(
                        svg,
                        r##"<rect x="{cx}" y="{cy}" width="{core_w}" height="{core_h}" rx="3" fill="white" stroke="#555"><title>core {c}</title></rect>"##
                    );
                    for (t, cpu) in self.cores[c].cpus.iter().enumerate() {
                        let x = cx + CORE_PAD + t * CPU_W;
                        let y = cy + CORE_PAD;
                        let fill = if !self.is_allowed(cpu) {
                            "#9a9a9a".to_string()
                        } else {
                            island_of(cpu).map_or("white".to_string(), colour)
                        };
                        let tip = match island_of(cpu) {
                            Some(i) => format!("cpu {cpu}, island {i}"),
                            None => format!("cpu {cpu}"),
                        };
                        let _ = writeln!(
                            svg,
                            r##"<rect x="{x}" y="{y}" width="{}" height="{CPU_H}" fill="{fill}" stroke="#999"><title>{tip}</title></rect>"##,
                            CPU_W - 2
                        );
                        let _ = writeln!(
                            svg,
                            r#"<text x="{}" y="{}" text-anchor="middle">{cpu}</text>"#,
                            x + (CPU_W - 2) / 2,
                            y + 15
                        );
                    }
                }
                ly += h + GAP;
            }
        }
        // Legend.
        for (k, (fill, text)) in legend.iter().enumerate() {
            let y = legend_y + k * 18;
            let _ = writeln!(
                svg,
                r##"<rect x="{PAD}" y="{y}" width="14" height="12" fill="{fill}" stroke="#555"/><text x="{}" y="{}">{}</text>"##,
                PAD + 20,
                y + 10,
                escape(text)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// (fill, text) of each legend line: the islands, then free and not-allowed CPUs.
fn legend_entries(plan: Option<&Marks>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(p) = plan {
        for (i, (_, text)) in p.islands.iter().enumerate() {
            out.push((colour(i), text.clone()));
        }
    }
    out.push((
        "white".to_string(),
        "free CPU (no island pinned here)".to_string(),
    ));
    out.push((
        "#9a9a9a".to_string(),
        "CPU not allowed for this process".to_string(),
    ));
    out
}

/// A distinct light colour per island: a fixed palette, then golden-angle hues.
fn colour(i: usize) -> String {
    const PALETTE: [&str; 12] = [
        "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
        "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
    ];
    match PALETTE.get(i) {
        Some(c) => (*c).to_string(),
        None => format!("hsl({:.0},70%,72%)", (i as f64 * 137.508) % 360.0),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use crate::deploy::{plan, DeploySpec, Islands};
    use crate::topology::{CpuSet, Topology};

    #[test]
    fn tree_lists_every_level() {
        let t = Topology::described("sockets=2,numa=2,l3=2,cores=2,threads=2")
            .unwrap()
            .with_allowed(&CpuSet::parse("0-14").unwrap())
            .unwrap();
        let tree = t.render_tree();
        assert!(tree.starts_with(
            "machine sockets=2,numa=2,l3=2,cores=2,threads=2 (2 sockets, 4 NUMA nodes, 4 L3 domains, 8 cores, 16 threads; 15 allowed)\n"
        ), "{tree}");
        assert!(tree.contains("├─ socket 0 (cpus 0-3,8-11)\n"), "{tree}");
        assert!(tree.contains("└─ socket 1 (cpus 4-7,12-15)\n"), "{tree}");
        assert!(tree.contains("NUMA node 3 (cpus 6-7,14-15)"), "{tree}");
        assert!(tree.contains("core 0: cpus 0,8\n"), "{tree}");
        assert!(
            tree.contains("core 7: cpus 7,15 (not allowed: 15)"),
            "{tree}"
        );
        assert_eq!(tree.matches("core ").count(), 8);
        assert_eq!(tree.matches("─ L3 ").count(), 4);
    }

    #[test]
    fn svg_colours_islands_and_has_a_legend() {
        let t = Topology::described("2x4x2").unwrap();
        let p = plan(&t, &DeploySpec::new(Islands::PerSocket)).unwrap();
        let svg = t.render_svg(Some(&p.marks()));
        assert!(svg.starts_with("<svg "));
        assert!(svg.trim_end().ends_with("</svg>"));
        // 16 CPUs: 8 in each island's colour.
        assert_eq!(svg.matches(r##"fill="#8dd3c7" stroke="#999""##).count(), 8);
        assert_eq!(svg.matches(r##"fill="#ffffb3" stroke="#999""##).count(), 8);
        assert!(svg.contains("island 0: cpus 0-3,8-11"));
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        let bare = t.render_svg(None);
        assert!(!bare.contains("island 0"));
        assert_eq!(bare.matches(r##"fill="white" stroke="#999""##).count(), 16);
    }
}
