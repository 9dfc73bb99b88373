//! The pages the checks read: README.md and every Markdown file of the book.

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A page: its path (relative to the repository's root) and its text.
pub struct Page {
    pub path: PathBuf,
    pub text: String,
}

/// README.md and every `.md` under `docs/src`, in a stable order.
pub fn all() -> Vec<Page> {
    let mut paths = vec![PathBuf::from("README.md")];
    let mut book = files_under(&root().join("docs/src"), "md");
    book.sort();
    paths.extend(
        book.into_iter()
            .map(|p| p.strip_prefix(root()).unwrap().to_path_buf()),
    );
    paths
        .into_iter()
        .map(|path| Page {
            text: read(&path),
            path,
        })
        .collect()
}

/// One page's text, by its path relative to the repository's root.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(root().join(path))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// `text` of the page at `path` as mdBook renders it: each `{{#include FILE}}` or
/// `{{#include FILE:NAME}}` line replaced by that file (relative to the page), or by its
/// lines between `<!-- ANCHOR: NAME -->` and `<!-- ANCHOR_END: NAME -->` — so that what a
/// book page takes from README.md is checked as part of that page.
pub fn rendered(path: &Path, text: &str) -> String {
    let here = path.parent().unwrap_or(Path::new(""));
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let Some(include) = line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|rest| rest.strip_suffix("}}"))
        else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let (file, name) = match include.split_once(':') {
            Some((file, name)) => (file, Some(name)),
            None => (include, None),
        };
        let included = std::fs::read_to_string(root().join(here).join(file))
            .unwrap_or_else(|e| panic!("{}: cannot include {file}: {e}", path.display()));
        let region: Vec<&str> = match name {
            None => included.lines().collect(),
            Some(name) => {
                let start = format!("<!-- ANCHOR: {name} -->");
                let end = format!("<!-- ANCHOR_END: {name} -->");
                let mut lines = included.lines().skip_while(|l| l.trim() != start);
                assert!(
                    lines.next().is_some(),
                    "{}: {file} has no anchor {name}",
                    path.display()
                );
                lines.take_while(|l| l.trim() != end).collect()
            }
        };
        for line in region.into_iter().filter(|l| !l.contains("<!-- ANCHOR")) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every file under `dir` (at any depth) whose name ends in `.{extension}`, unsorted.
pub fn files_under(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    collect(dir, extension, &mut found);
    found
}

fn collect(dir: &Path, extension: &str, into: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, extension, into);
        } else if path.extension().is_some_and(|e| e == extension) {
            into.push(path);
        }
    }
}

/// The id mdBook (and GitHub) give a heading: its text without markup, lowercase, spaces
/// to `-`, punctuation other than `-` and `_` dropped.
pub fn slug(heading: &str) -> String {
    // A heading's own markup: code spans and emphasis keep their text, links their label.
    let mut text = heading.replace(['`', '*'], "");
    while let (Some(open), Some(mid)) = (text.find('['), text.find("](")) {
        let Some(close) = text[mid..].find(')') else {
            break;
        };
        if open > mid {
            break;
        }
        let label = text[open + 1..mid].to_owned();
        text.replace_range(open..mid + close + 1, &label);
    }
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// A page's lines outside code: fenced blocks and indented blocks (four spaces or a tab
/// after a blank line) are left out.
pub fn prose_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut fence: Option<&str> = None;
    let mut indented = false;
    let mut after_blank = true;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(marker) = fence {
            if trimmed.starts_with(marker) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            continue;
        }
        let is_indented = line.starts_with("    ") || line.starts_with('\t');
        if line.trim().is_empty() {
            after_blank = true;
            continue;
        }
        // An indented block starts after a blank line and goes on while lines are
        // indented (a list item's continuation is indented too, but follows no blank).
        indented = is_indented && (indented || after_blank) && !is_list_continuation(&lines);
        after_blank = false;
        if !indented {
            lines.push(line);
        }
    }
    lines
}

/// Whether the last prose line was part of a list (whose paragraphs are indented).
fn is_list_continuation(lines: &[&str]) -> bool {
    lines.last().is_some_and(|line| {
        let t = line.trim_start();
        line.starts_with(' ') || t.starts_with("- ") || t.starts_with("* ") || t.starts_with("| ")
    })
}
