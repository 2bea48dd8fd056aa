//! The `-f FIELDS` lists of the views' columns, as uftrace takes them:
//! names separated by commas, `+LIST` added to the default ones, `none`.

#![forbid(unsafe_code)]

/// `spec` as a list of the fields `named` knows (each once, in the order
/// given), `+LIST` after `default`, `none` for no field; `what` names the
/// fields in the error of an unknown one.
pub(crate) fn parse<T: Copy + PartialEq>(
    spec: &str,
    default: &[T],
    named: impl Fn(&str) -> Option<T>,
    what: &str,
) -> Result<Vec<T>, String> {
    let (mut out, list) = match spec.strip_prefix('+') {
        Some(rest) => (default.to_vec(), rest),
        None => (Vec::new(), spec),
    };
    if list == "none" {
        return Ok(out);
    }
    for f in list.split(',').filter(|f| !f.is_empty()) {
        let field = named(f).ok_or_else(|| format!("`{f}`: not {what}"))?;
        if !out.contains(&field) {
            out.push(field);
        }
    }
    Ok(out)
}
