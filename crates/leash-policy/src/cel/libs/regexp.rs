//! Kubernetes' regex library: `find`, `findAll`.

#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn regex(args: &[Value], function: &str) -> Result<regex::Regex, ExecutionError> {
    let re = str_arg(args, 1, function)?;
    regex::Regex::new(re).map_err(|e| ferr(function, e))
}

overload!(regex_find, |args| {
    let hay = str_arg(args, 0, "find")?;
    let re = regex(args, "find")?;
    Ok(s(re.find(hay).map(|m| m.as_str()).unwrap_or("")))
});

pub(super) fn find_all(args: &[Value], limit: i64) -> R {
    let hay = str_arg(args, 0, "findAll")?;
    let re = regex(args, "findAll")?;
    let n = if limit < 0 {
        usize::MAX
    } else {
        limit as usize
    };
    Ok(Value::List(Arc::new(
        re.find_iter(hay).take(n).map(|m| s(m.as_str())).collect(),
    )))
}

overload!(regex_find_all, |args| find_all(args, -1));
overload!(regex_find_all_n, |args| {
    let n = match arg(args, 2, "findAll")? {
        Value::Int(n) => *n,
        _ => return Err(ferr("findAll", "expected an int limit")),
    };
    find_all(args, n)
});
