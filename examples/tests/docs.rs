//! The docs show the recipes' files word for word: every code block marked
//! `<!-- include: FILE -->` must be that file, so the SQL a user copies from
//! the docs is the SQL the tests run.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Every `(file named by a marker, block following it)` of a Markdown file.
fn includes(doc: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(path) = line
            .strip_prefix("<!-- include: ")
            .and_then(|rest| rest.strip_suffix(" -->"))
        else {
            continue;
        };
        let opening = lines.get(at + 1).copied().unwrap_or_default();
        assert!(
            opening.starts_with("```"),
            "the include of {path} is not followed by a code block"
        );
        let body: Vec<&str> = lines[at + 2..]
            .iter()
            .take_while(|line| **line != "```")
            .copied()
            .collect();
        found.push((path.to_owned(), body.join("\n")));
    }
    found
}

/// Checks every marked block of `doc` and returns the files it includes.
fn check(doc: &str) -> Vec<String> {
    let root = workspace();
    let text = std::fs::read_to_string(root.join(doc)).unwrap_or_else(|err| panic!("{doc}: {err}"));
    includes(&text)
        .into_iter()
        .map(|(path, block)| {
            let file = std::fs::read_to_string(root.join(&path))
                .unwrap_or_else(|err| panic!("{doc} includes {path}: {err}"));
            assert_eq!(
                block,
                file.trim_end_matches('\n'),
                "{doc}: the block marked as {path} differs from the file"
            );
            path
        })
        .collect()
}

#[test]
fn recipes_show_every_example_file_as_it_is() {
    let shown = check("docs/recipes.md");
    for file in [
        "examples/sql/schema.sql",
        "examples/sql/fenced-write.sql",
        "examples/fenced-postgres.sh",
        "examples/fenced_postgres.py",
        "examples/sql/leader-schema.sql",
        "examples/sql/leader-act.sql",
        "examples/cron/nightly-import.crontab",
        "examples/systemd/nightly-import.service",
        "examples/systemd/nightly-import.timer",
    ] {
        assert!(
            shown.iter().any(|path| path == file),
            "docs/recipes.md does not show {file}"
        );
    }
}

#[test]
fn exec_doc_fences_with_the_examples_sql() {
    let shown = check("docs/exec.md");
    for file in ["examples/sql/schema.sql", "examples/fenced-postgres.sh"] {
        assert!(
            shown.iter().any(|path| path == file),
            "docs/exec.md does not show {file}"
        );
    }
}

#[test]
fn a_changed_block_is_caught() {
    let doc = "<!-- include: a.sql -->\n```sql\nSELECT 1;\n```\n";
    assert_eq!(
        includes(doc),
        [("a.sql".to_owned(), "SELECT 1;".to_owned())]
    );
}
