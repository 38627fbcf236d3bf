//! The README and `docs/` stay true: the set-up commands are the ones CI
//! runs, the README's command table lists exactly the binary's subcommands,
//! the options `docs/cli.md` names for `islands bench` exist, and every
//! relative link points at a file (and heading) that exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(args)
        .output()
        .expect("run the islands binary");
    assert!(out.status.success(), "islands {args:?} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The lines of the first fenced block after the heading `heading`.
fn block_after(text: &str, heading: &str) -> Vec<String> {
    let from = text
        .find(heading)
        .unwrap_or_else(|| panic!("no heading {heading:?}"));
    let mut lines = text[from..].lines().skip_while(|l| !l.starts_with("```"));
    lines.next();
    lines
        .take_while(|l| !l.starts_with("```"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_set_up_commands_are_the_ones_ci_runs() {
    let readme = read("README.md");
    let commands: Vec<String> = block_after(&readme, "## Set-up on a fresh machine")
        .iter()
        .map(|l| l.split('#').next().unwrap().trim().to_string())
        .collect();
    assert_eq!(
        commands,
        ["cargo run --release -- bench", "cargo test --release"]
    );
    let ci = read(".ci/run");
    for c in [
        "cargo test --release",
        "cargo run --release -p islands --example bank",
    ] {
        assert!(
            ci.lines().any(|l| l.trim() == c),
            ".ci/run does not run `{c}`"
        );
    }
    assert!(readme.contains("cargo run --release -p islands --example bank"));
    assert!(root().join("crates/engine/examples/bank.rs").is_file());
}

#[test]
fn the_readme_lists_every_subcommand_and_no_other() {
    let text = help(&["--help"]);
    let binary: BTreeSet<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|&c| c != "help")
        .map(str::to_string)
        .collect();
    assert!(binary.contains("bench"), "{text}");
    let readme: BTreeSet<String> = read("README.md")
        .lines()
        .filter_map(|l| l.strip_prefix("| `islands "))
        .filter_map(|l| l.split([' ', '`']).next())
        .map(str::to_string)
        .collect();
    assert_eq!(readme, binary, "the README's command table");
}

#[test]
fn the_bench_options_docs_cli_names_exist() {
    let cli = read("docs/cli.md");
    let from = cli
        .find("## Common options")
        .expect("a common-options section");
    let section = &cli[from..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let named: BTreeSet<&str> = section
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .collect();
    assert!(named.len() > 20, "{named:?}");
    let text = help(&["bench", "--help"]);
    for o in named {
        assert!(
            text.contains(&format!("{o} ")) || text.contains(&format!("{o}\n")),
            "docs/cli.md names `islands bench {o}`, which `islands bench --help` does not list"
        );
    }
}

/// A heading's anchor as GitHub makes it.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn relative_links_point_at_files_and_headings() {
    let mut files = vec![root().join("README.md")];
    for e in std::fs::read_dir(root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, _) in text.match_indices("](") {
            let target = &text[i + 2..];
            let target = &target[..target.find(')').unwrap()];
            if target.starts_with("http") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            assert!(
                resolved.exists(),
                "{}: link to {target}: no such file",
                file.display()
            );
            if !anchor.is_empty() {
                let linked = std::fs::read_to_string(&resolved).unwrap();
                let anchors: Vec<String> = linked
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .map(|h| slug(h.trim_start_matches('#')))
                    .collect();
                assert!(
                    anchors.iter().any(|a| a == anchor),
                    "{}: link to {target}: no such heading (has {anchors:?})",
                    file.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 10, "only {checked} links found");
}
