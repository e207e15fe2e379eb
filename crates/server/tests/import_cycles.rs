//! The server crate's modules form no import cycle: each can be read, and
//! tested, on top of the ones it uses. The check reads the sources: every
//! `crate::NAME` path and every `use crate::{...}` item outside test code is
//! an edge to module NAME, or to the crate root when NAME is an item the
//! root defines.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

const ROOT: &str = "lib";

fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            // Unit tests may use anything.
            let code = text.split("#[cfg(test)]").next().unwrap_or("").to_owned();
            out.insert(name, code);
        }
    }
    out
}

/// The first segments of the paths a `use crate::{...}` group names.
fn group_items(group: &str) -> Vec<String> {
    let (mut depth, mut item, mut items) = (0, String::new(), Vec::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
            _ if depth == 0 => item.push(c),
            _ => {}
        }
    }
    items.push(item);
    items.iter().map(|i| i.trim().split("::").next().unwrap_or("").trim().to_owned()).collect()
}

fn edges(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let target = |name: &str| if mods.contains_key(name) { name.to_owned() } else { ROOT.to_owned() };
    let mut out = BTreeMap::new();
    for (m, code) in mods {
        let mut to = BTreeSet::new();
        let lines: Vec<&str> = code.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
        let code = lines.join("\n");
        let mut rest = code.as_str();
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find("};").expect("a use group ends");
                to.extend(group_items(&group[..end]).iter().filter(|i| !i.is_empty()).map(|i| target(i)));
            } else {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                to.insert(target(&name));
            }
        }
        if m == ROOT {
            // The root declares every module: only its code's uses count.
            for name in mods.keys() {
                let used = code.contains(&format!("{name}::")) || code.contains(&format!("{name}::{{"));
                if used && name != ROOT {
                    to.insert(name.clone());
                }
            }
        }
        to.remove(m);
        out.insert(m.clone(), to);
    }
    out
}

/// A cycle through `from`, if any (depth-first search).
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_owned());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for next in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|n| visit(n, edges, &mut Vec::new(), &mut done))
}

#[test]
fn the_server_modules_form_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    assert!(mods.contains_key("driver") && mods.contains_key(ROOT), "read {}", src.display());
    let edges = edges(&mods);
    if let Some(c) = cycle(&edges) {
        panic!("import cycle: {}", c.join(" -> "));
    }
}

#[test]
fn the_check_finds_a_cycle_when_there_is_one() {
    let mods: BTreeMap<String, String> = [
        ("lib", "mod a; mod b; fn f() { a::x(); }"),
        ("a", "use crate::{b::Y, c};"),
        ("b", "fn g() -> crate::a::X {}"),
        ("c", "// crate::a in a comment is no use\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let edges = edges(&mods);
    assert_eq!(edges["a"], BTreeSet::from(["b".to_owned(), "c".to_owned()]));
    assert!(edges["c"].is_empty());
    let c = cycle(&edges).expect("a -> b -> a");
    assert!(c.contains(&"a".to_owned()) && c.contains(&"b".to_owned()), "{c:?}");
}
