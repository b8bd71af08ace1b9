//! Expands the `--- @include` directives of `lua/*.lua` and compiles the expanded
//! scripts, with their SHA1s, into the crate (`$OUT_DIR/scripts_generated.rs`).
//!
//! Expansion is done here, once, so that the text hashed, checked against the
//! manifest and sent to Redis is the same byte string everywhere.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

const INCLUDE_DIRECTIVE: &str = "--- @include \"";

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let lua_dir = manifest_dir.join("../../lua");
    let lua_dir = lua_dir.canonicalize().unwrap_or(lua_dir);
    println!("cargo:rerun-if-changed={}", lua_dir.display());
    println!(
        "cargo:rerun-if-changed={}",
        lua_dir.join("includes").display()
    );

    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let mut names: Vec<String> = fs::read_dir(&lua_dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".lua"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();

    let mut table = String::from(
        "/// Every expanded script found in `lua/`: (file stem, expanded source, sha1).\n",
    );
    table.push_str("pub(crate) static GENERATED: &[(&str, &str, &str)] = &[\n");
    for name in &names {
        let path = lua_dir.join(name);
        println!("cargo:rerun-if-changed={}", path.display());
        let mut seen = HashMap::new();
        let expanded = match expand(&path, &lua_dir, &mut seen, None) {
            Ok(text) => text,
            Err(e) => panic!("expanding {}: {e}", path.display()),
        };
        let sha = sha1_smol::Sha1::from(expanded.as_bytes())
            .digest()
            .to_string();
        let stem = name.trim_end_matches(".lua");
        let out = out_dir.join(format!("{stem}.expanded.lua"));
        fs::write(&out, &expanded).unwrap();
        writeln!(
            table,
            "    ({stem:?}, include_str!({:?}), {sha:?}),",
            out.display().to_string()
        )
        .unwrap();
    }
    table.push_str("];\n");
    fs::write(out_dir.join("scripts_generated.rs"), table).unwrap();
}

/// Splices each included helper in place of its first directive; later
/// directives for the same helper become empty, so a helper is defined once.
///
/// An indented directive sits inside a function (a loader that creates rarely
/// used helpers only when a call needs them), so what it splices is local to
/// that function: `scope` names it, and a later directive for the same helper
/// from any other scope is an error rather than an empty line that would leave
/// the name undefined there. Such a helper must be included at top level first.
fn expand(
    path: &Path,
    lua_dir: &Path,
    seen: &mut HashMap<PathBuf, Option<String>>,
    scope: Option<&str>,
) -> Result<String, String> {
    let text = fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut out = String::with_capacity(text.len());
    let mut enclosing_function = String::new();
    for (number, line) in text.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if line.starts_with("local function ") {
            enclosing_function = format!("{}:{}", path.display(), number + 1);
        }
        if let Some(rest) = trimmed.strip_prefix(INCLUDE_DIRECTIVE) {
            let target = rest
                .split('"')
                .next()
                .ok_or_else(|| format!("malformed include line: {line}"))?;
            let file = lua_dir.join(format!("{target}.lua"));
            println!("cargo:rerun-if-changed={}", file.display());
            let key = file
                .canonicalize()
                .map_err(|e| format!("include {target}: {e}"))?;
            let here: Option<String> = match scope {
                Some(s) => Some(s.to_owned()),
                None if trimmed.len() < line.len() => Some(enclosing_function.clone()),
                None => None,
            };
            match seen.get(&key) {
                None => {
                    seen.insert(key, here.clone());
                    let inner = expand(&file, lua_dir, seen, here.as_deref())?;
                    out.push_str(&inner);
                    if !inner.ends_with('\n') {
                        out.push('\n');
                    }
                }
                Some(None) => {}
                Some(Some(first)) if here.as_deref() == Some(first.as_str()) => {}
                Some(Some(first)) => {
                    return Err(format!(
                        "{target} was first included inside the function at {first}, so it is not \
                         defined where {} includes it: include it at top level before that function",
                        path.display()
                    ))
                }
            }
        } else {
            out.push_str(line);
        }
    }
    Ok(out)
}
