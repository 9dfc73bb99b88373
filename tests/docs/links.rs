//! Every relative link in README.md and the book leads somewhere: the file exists, and an
//! anchor names a heading of that page (as mdBook and GitHub make ids: lowercase, spaces
//! to `-`, punctuation other than `-` and `_` dropped). Every page of the book is in its
//! `SUMMARY.md`. Links out of the repository (`https:` and the like) are not followed:
//! the tests talk to loopback only.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use crate::pages::{self, Page};

/// `text` without inline code spans.
fn without_code_spans(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links `[text](target)` and `![alt](target)` of `text`.
fn link_targets(text: &str) -> Vec<String> {
    // Code spans per line: a stray backtick hides no more than its line.
    let text: String = pages::prose_lines(text)
        .into_iter()
        .map(|line| without_code_spans(line) + "\n")
        .collect();
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].trim();
        // `[text](target "title")`
        let target = target.split_whitespace().next().unwrap_or("");
        targets.push(target.trim_matches(['<', '>']).to_owned());
        rest = &after[end..];
    }
    targets
}

/// The ids of a page's headings (a repeated one gets `-1`, `-2`… as mdBook does), and
/// the explicit `id="…"` anchors of its HTML.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut ids = BTreeSet::new();
    for line in pages::prose_lines(text) {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            let base = pages::slug(&trimmed[hashes + 1..]);
            let n = seen.entry(base.clone()).or_default();
            ids.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        let mut rest = line;
        while let Some(at) = rest.find("id=\"") {
            let value = &rest[at + 4..];
            let Some(end) = value.find('"') else { break };
            ids.insert(value[..end].to_owned());
            rest = &value[end..];
        }
    }
    ids
}

/// `path` with `.` and `..` taken out (no file system access: the target may not exist);
/// `None` when it climbs above where it starts, or starts at the root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            // An absolute path is outside the repository whatever it names.
            Component::RootDir | Component::Prefix(_) => return None,
            other => out.push(other),
        }
    }
    Some(out)
}

/// What is wrong with the link `target` on `page`, if anything.
fn broken(page: &Page, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link".into());
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let here = page.path.parent().unwrap_or(Path::new(""));
    let resolved = if file.is_empty() {
        page.path.clone()
    } else {
        match normalize(&here.join(file)) {
            Some(resolved) => resolved,
            None => return Some(format!("{target} leads out of the repository")),
        }
    };
    // The book is read as HTML too, where only its own pages are: a page of the book
    // links to another page, or names a repository file as code.
    let book = Path::new("docs/src");
    if page.path.starts_with(book) && !resolved.starts_with(book) {
        return Some(format!(
            "{target} leaves the book (docs/src): the HTML book has no {}; write the path \
             as code, or include the file in a page",
            resolved.display()
        ));
    }
    let on_disk = pages::root().join(&resolved);
    if !on_disk.exists() {
        return Some(format!("{target}: no {}", resolved.display()));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if resolved.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let ids = anchors(&pages::rendered(&resolved, &pages::read(&resolved)));
    (!ids.contains(anchor)).then(|| {
        format!(
            "{target}: {} has no heading with the id {anchor:?}",
            resolved.display()
        )
    })
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut problems = Vec::new();
    let pages = pages::all();
    assert!(pages.len() > 10, "the book's pages were not found");
    for page in &pages {
        // As rendered: a link a book page takes from README.md must lead somewhere from
        // the book page, where the HTML book shows it.
        for target in link_targets(&pages::rendered(&page.path, &page.text)) {
            if let Some(problem) = broken(page, &target) {
                problems.push(format!("{}: {problem}", page.path.display()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} broken links:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let summary_path = Path::new("docs/src/SUMMARY.md");
    let summary = pages::read(summary_path);
    let listed: BTreeSet<PathBuf> = link_targets(&summary)
        .into_iter()
        .filter_map(|target| normalize(&Path::new("docs/src").join(target)))
        .collect();
    let unlisted: Vec<String> = pages::all()
        .into_iter()
        .map(|page| page.path)
        .filter(|path| path.starts_with("docs/src") && path.as_path() != summary_path)
        .filter(|path| !listed.contains(path))
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        unlisted.is_empty(),
        "pages the book's SUMMARY.md does not list (mdBook would leave them out): {unlisted:?}"
    );
}

#[test]
fn ids_are_made_the_way_mdbook_makes_them() {
    let slug = pages::slug;
    assert_eq!(slug("Every era of upstream"), "every-era-of-upstream");
    assert_eq!(
        slug("In front of a stdio server (sidecar)"),
        "in-front-of-a-stdio-server-sidecar"
    );
    assert_eq!(slug("SEP-1364's dialect"), "sep-1364s-dialect");
    assert_eq!(
        slug("Stateless clients (2026-07-28) in front of a legacy server"),
        "stateless-clients-2026-07-28-in-front-of-a-legacy-server"
    );
    assert_eq!(slug("The `[auth]` table"), "the-auth-table");
    assert_eq!(slug("The **bold** one"), "the-bold-one");
    let ids = anchors("# A\n## B\n## B\n```sh\n# not a heading\n```\n\n    # nor this\n");
    assert_eq!(
        ids.into_iter().collect::<Vec<_>>(),
        ["a", "b", "b-1"],
        "a repeated heading's id is numbered, code is not a heading"
    );
    assert_eq!(normalize(Path::new("docs/../../x")), None);
    assert_eq!(normalize(Path::new("/etc/hosts")), None);
    assert_eq!(
        normalize(Path::new("docs/src/../x.md")),
        Some(PathBuf::from("docs/x.md"))
    );
    assert_eq!(
        link_targets(
            "[a](x.md#y) `[b](not)` ![c](d.svg \"title\")\n```\n[e](f)\n```\na ` b\n[g](h)\n"
        ),
        ["x.md#y", "d.svg", "h"]
    );
}
