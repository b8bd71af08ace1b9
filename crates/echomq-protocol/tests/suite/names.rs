//! Every function an expanded script calls is defined in it or is one of
//! Redis's Lua globals.
//!
//! Redis refuses a read of an undefined global only when the line runs, so a
//! helper moved into a loader (lua/README.md) but still called at top level,
//! or an include dropped from a script, fails on the first job that takes
//! that path. This check is lexical: it strips comments and strings, then
//! compares the names called as `name(` with the names declared `local`.
//! It does not follow scopes: a top-level call of a name declared only
//! inside a loader passes here. The include expander's scope rule
//! (crates/echomq-protocol/build.rs) catches the include-order form of that
//! mistake; the script's own tests catch the rest.

use std::collections::BTreeSet;

/// The globals of Redis's Lua environment that the scripts may call.
const GLOBALS: &[&str] = &[
    "assert",
    "error",
    "getmetatable",
    "ipairs",
    "next",
    "pairs",
    "pcall",
    "rawequal",
    "rawget",
    "rawset",
    "select",
    "setmetatable",
    "tonumber",
    "tostring",
    "type",
    "unpack",
    "xpcall",
];

const KEYWORDS: &[&str] = &[
    "and", "elseif", "if", "in", "not", "or", "return", "until", "while",
];

/// The source with comments removed and string literals emptied.
fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        if source[i..].starts_with("--[[") {
            i = source[i..]
                .find("]]")
                .map_or(bytes.len(), |end| i + end + 2);
        } else if source[i..].starts_with("--") {
            i = source[i..].find('\n').map_or(bytes.len(), |end| i + end);
        } else if bytes[i] == b'"' || bytes[i] == b'\'' {
            let quote = bytes[i];
            i += 1;
            while i < bytes.len() && bytes[i] != quote {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            let c = source[i..].chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// (declared local names, names called as plain `name(`).
fn names(code: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut declared = BTreeSet::new();
    let mut called = BTreeSet::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    let mut previous_word = String::new();
    while i < chars.len() {
        if !(chars[i].is_ascii_alphabetic() || chars[i] == '_') {
            if !chars[i].is_whitespace() {
                previous_word.clear();
            }
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_name_char(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let member = start > 0 && matches!(chars[start - 1], '.' | ':');
        let mut j = i;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        if previous_word == "local" || previous_word == "function" {
            declared.insert(word.clone());
        } else if !member && j < chars.len() && chars[j] == '(' && !KEYWORDS.contains(&&*word) {
            called.insert(word.clone());
        }
        // `local a, b = …` declares every name of the list.
        let in_local_list = previous_word == "local" && j < chars.len() && chars[j] == ',';
        previous_word = if in_local_list { "local".into() } else { word };
        if in_local_list {
            i = j + 1;
        }
    }
    (declared, called)
}

#[test]
fn every_called_function_is_defined() {
    let mut problems = Vec::new();
    for (stem, source, _) in echomq_protocol::scripts::compiled() {
        let (declared, called) = names(&code_only(source));
        for name in called {
            if !declared.contains(&name) && !GLOBALS.contains(&&*name) {
                problems.push(format!("{stem}: {name}()"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "called but never defined: {problems:?}"
    );
}

#[test]
fn the_check_sees_an_undefined_call() {
    let (declared, called) = names(&code_only(
        "--[[ f() ]]\nlocal function g(a, b) return a end\nlocal x, y = 1, 2\n\
         h(\"k()\") -- m()\nredis.call(\"GET\", KEYS[1])\nif (g(1)) then end",
    ));
    assert!(declared.contains("g") && declared.contains("x") && declared.contains("y"));
    assert_eq!(
        called.into_iter().collect::<Vec<_>>(),
        vec!["g".to_owned(), "h".to_owned()]
    );
}
