//! Names as views show them: C++ (Itanium) and Rust (legacy and v0)
//! symbols demangled in uftrace's simple form by default (the qualified
//! name alone), in full, or not at all (`--demangle`).

/// How symbol names are shown (uftrace's `--demangle`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum Demangle {
    /// Qualified names alone: no return type, template arguments,
    /// parameters, qualifiers or clone suffix (`std::vector::push_back`).
    #[default]
    Simple = 0,
    /// Everything the mangled name says.
    Full = 1,
    /// The symbols as the objects name them.
    No = 2,
}

/// `name` demangled in the simple form (C++ Itanium, Rust legacy and v0):
/// the names sites go by, which filters match and views show by default,
/// as uftrace does.
pub fn demangle(name: &str) -> String {
    demangle_as(name, Demangle::Simple)
}

/// `name` shown as `how` says; names that are not mangled are kept.
pub fn demangle_as(name: &str, how: Demangle) -> String {
    if how == Demangle::No {
        return name.to_string();
    }
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // The alternate form drops the hash.
        let full = format!("{d:#}");
        return match how {
            Demangle::Simple => simple_rust(&full),
            _ => full,
        };
    }
    // gcc's static initialiser of a file is named after its first
    // function's symbol.
    if let Some(first) = name.strip_prefix("_GLOBAL__sub_I_") {
        if first.starts_with("_Z") {
            return format!("_GLOBAL__sub_I_{}", demangle_as(first, how));
        }
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            let opts = match how {
                Demangle::Simple => cpp_demangle::DemangleOptions::new()
                    .no_params()
                    .no_return_type(),
                _ => cpp_demangle::DemangleOptions::default(),
            };
            if let Ok(s) = sym.demangle(&opts) {
                return match how {
                    Demangle::Simple => {
                        abi_tags_as_names(&strip_enclosing_params(&strip_template_args(&s)))
                    }
                    _ => s,
                };
            }
        }
    }
    name.to_string()
}

/// A demangled Rust path in the simple form: without generic arguments
/// (`from_trait::<R, T>` → `from_trait`, `Vec<T>::push` → `Vec::push`);
/// a trait impl keeps its type and trait (`<Deserializer<R> as
/// de::Deserializer>::f` → `<Deserializer as de::Deserializer>::f`: the
/// trait tells `Debug::fmt` from `Display::fmt`), an inherent impl's
/// brackets go (`<Vec<T>>::push` → `Vec::push`).
fn simple_rust(name: &str) -> String {
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'<' {
            let prev = out.as_bytes().last().copied();
            let turbofish = out.ends_with("::");
            let generic = turbofish
                || prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'}');
            if let Some(end) = closing(b, i) {
                if generic {
                    if turbofish {
                        out.truncate(out.len() - 2);
                    }
                    i = end + 1;
                    continue;
                }
                // A qualified path: `<T as Trait>` keeps its brackets,
                // `<T>` (an inherent impl) is T.
                let inner = simple_rust(&name[i + 1..end]);
                if inner.contains(" as ") {
                    out.push('<');
                    out.push_str(&inner);
                    out.push('>');
                } else {
                    out.push_str(&inner);
                }
                i = end + 1;
                continue;
            }
        }
        let c = name[i..].chars().next().expect("inside the string");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The index of the `>` that closes the `<` at `open` (the `>` of `->` in
/// a function type does not), if any.
fn closing(b: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'<' => depth += 1,
            b'>' if k > 0 && b[k - 1] == b'-' => {}
            b'>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// `name` with its ABI tags as uftrace's demangler writes them, as one
/// more name (`f[abi:cxx11]` → `f::cxx11`).
fn abi_tags_as_names(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find("[abi:") {
        out.push_str(&rest[..i]);
        match rest[i..].find(']') {
            Some(j) => {
                out.push_str("::");
                out.push_str(&rest[i + 5..i + j]);
                rest = &rest[i + j + 1..];
            }
            None => {
                rest = &rest[i..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `name` without the parameter lists of the functions that enclose a
/// local entity (`f()::{lambda()#1}::_FUN` → `f::{lambda()#1}::_FUN`),
/// which the demangler keeps even when asked for no parameters; a
/// `(anonymous namespace)` stays.
fn strip_enclosing_params(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if c == '(' && !rest.starts_with("(anonymous namespace)") {
            // A group closed before `::`: an enclosing function's.
            let mut depth = 0usize;
            let end = rest.char_indices().find_map(|(i, ch)| {
                match ch {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                None
            });
            if let Some(end) = end.filter(|&e| rest[e..].starts_with("::")) {
                rest = &rest[end..];
                continue;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// `name` without its template argument lists (`<...>`, nested), keeping
/// the angle brackets of operator names (`operator<<`, `operator->`).
/// Inside an argument list, `(...)` groups nest too, and a `>` in one is
/// an operator (`f<(3>2)>`), not the list's end.
fn strip_template_args(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    // The open `<` and `(` inside template arguments, innermost last.
    let mut open: Vec<char> = Vec::new();
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if open.is_empty() && rest.starts_with("operator") {
            // The operator's own symbol, which may hold < or >.
            let after = &rest["operator".len()..];
            let op_len = [
                "<=>", "<<=", ">>=", "<<", ">>", "<=", ">=", "->*", "->", "<", ">",
            ]
            .iter()
            .find(|op| after.starts_with(**op))
            .map_or(0, |op| op.len());
            let take = "operator".len() + op_len;
            out.push_str(&rest[..take]);
            rest = &rest[take..];
            continue;
        }
        match c {
            '<' => {
                if open.is_empty() && out.ends_with(' ') {
                    out.pop(); // gcc's `operator< <int>`
                }
                open.push('<');
            }
            '(' if !open.is_empty() => open.push('('),
            ')' if !open.is_empty() => {
                while let Some(o) = open.pop() {
                    if o == '(' {
                        break;
                    }
                }
            }
            '>' if open.last() == Some(&'<') => {
                open.pop();
            }
            _ if open.is_empty() => out.push(c),
            _ => {}
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust() {
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar");
        assert_eq!(demangle_as("_ZN3foo3barEv", Demangle::Full), "foo::bar()");
        assert_eq!(demangle_as("_ZN3foo3barEv", Demangle::No), "_ZN3foo3barEv");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("plain_c"), "plain_c");
    }

    #[test]
    fn simple_rust_names_have_no_generic_arguments() {
        for (full, simple) in [
            (
                "serde_json::de::from_trait::<serde_json::read::SliceRead, app::Config>",
                "serde_json::de::from_trait",
            ),
            (
                "<serde_json::de::Deserializer<R> as serde::de::Deserializer>::deserialize_any::<V>",
                "<serde_json::de::Deserializer as serde::de::Deserializer>::deserialize_any",
            ),
            ("core::ptr::drop_in_place<alloc::vec::Vec<u8>>", "core::ptr::drop_in_place"),
            ("<&T as core::fmt::Debug>::fmt", "<&T as core::fmt::Debug>::fmt"),
            ("<[u8] as core::fmt::Debug>::fmt", "<[u8] as core::fmt::Debug>::fmt"),
            ("alloc::vec::Vec<T,A>::push", "alloc::vec::Vec::push"),
            ("<alloc::vec::Vec<u8>>::push", "alloc::vec::Vec::push"),
            ("std::rt::lang_start::<()>::{closure#0}", "std::rt::lang_start::{closure#0}"),
            (
                "<app::Wrap<fn(u8) -> u8> as app::Run>::run",
                "<app::Wrap as app::Run>::run",
            ),
            (
                "<<A as B>::C<T> as D>::e",
                "<<A as B>::C as D>::e",
            ),
            ("main", "main"),
        ] {
            assert_eq!(simple_rust(full), simple, "{full}");
        }
        // Legacy and v0 symbols, through the demangler.
        assert_eq!(
            demangle("_ZN70_$LT$alloc..vec..Vec$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h0123456789abcdefE"),
            "<alloc::vec::Vec as core::ops::drop::Drop>::drop"
        );
        assert_eq!(
            demangle_as(
                "_ZN70_$LT$alloc..vec..Vec$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h0123456789abcdefE",
                Demangle::Full
            ),
            "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop"
        );
    }

    #[test]
    fn simple_names_are_uftraces() {
        for (mangled, simple) in [
            ("_ZNK2Ci4areaEv", "Ci::area"),
            ("_ZN2CiD0Ev", "Ci::~Ci"),
            ("_ZNSt6vectorISt6threadSaIS0_EED1Ev", "std::vector::~vector"),
            (
                "_ZNSt6thread11_State_implINS_8_InvokerISt5tupleIJZ4mainEUlvE_EEEEE6_M_runEv",
                "std::thread::_State_impl::_M_run",
            ),
            (
                "_ZNSt8_Rb_treeINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt4pairIKS5_iESt10_Select1stIS8_ESt4lessIS5_ESaIS8_EE8_M_eraseEPSt13_Rb_tree_nodeIS8_E.isra.0",
                "std::_Rb_tree::_M_erase",
            ),
            ("_Z7checkedd", "checked"),
            ("_Z5twiceIiET_S0_", "twice"),
        ] {
            assert_eq!(demangle(mangled), simple, "{mangled}");
        }
        assert_eq!(
            strip_template_args("std::ostream& std::operator<< <std::char_traits<char> >"),
            "std::ostream& std::operator<<"
        );
        assert_eq!(strip_template_args("a::operator->"), "a::operator->");
        assert_eq!(strip_template_args("m<int>::operator<=>"), "m::operator<=>");
        assert_eq!(strip_template_args("f<(3>2)>"), "f");
        assert_eq!(
            strip_enclosing_params("a::f()::{lambda()#1}::_FUN"),
            "a::f::{lambda()#1}::_FUN"
        );
        assert_eq!(
            strip_enclosing_params("(anonymous namespace)::g"),
            "(anonymous namespace)::g"
        );
        assert_eq!(demangle("_GLOBAL__sub_I__Z4leafi"), "_GLOBAL__sub_I_leaf");
        assert_eq!(
            demangle("_ZN4Json11writeStringB5cxx11ERKNS_8Factory_5ValueE"),
            "Json::writeString::cxx11"
        );
        assert_eq!(
            demangle(
                "_ZNSt6thread11_State_implINS_8_InvokerISt5tupleIJMNSt13__future_base17_Async_state_implINS1_IS2_IJPFiiEiEEEEiEEFvvEPS9_EEEEE6_M_runEv"
            ),
            "std::thread::_State_impl::_M_run"
        );
    }
}
