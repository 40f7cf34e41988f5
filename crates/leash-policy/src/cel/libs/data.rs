//! Kyverno's data libraries: `resource.Get`/`List`, `globalContext.Get`, `image.GetMetadata`, `http.Get`/`Post` and `generator.Apply`, over the caller's [`ClusterData`].

#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) static DATA_TYPE: Type = Type::new_unspecified_type("kyverno.data");

/// `resource`, `globalContext` and `image`: the caller's cluster data, borrowed for
/// one evaluation. Lookups go through [`Indexer::get`] with a list key
/// (`[op, args...]`), the one way an overload reaches a borrowed value.
#[derive(Debug, Clone, Copy)]
pub(super) struct DataVal<'a> {
    data: &'a dyn ClusterData,
}

indexer_val!(DataVal, DATA_TYPE, lookup, "data");

impl DataVal<'_> {
    fn lookup(&self, key: &[Value]) -> R {
        let text = |i: usize| -> &str {
            match key.get(i) {
                Some(Value::String(s)) => s.as_str(),
                _ => "",
            }
        };
        match text(0) {
            "get" => {
                let (api, res, ns, name) = (text(1), text(2), text(3), text(4));
                self.data
                    .get(api, res, ns, name)
                    .map(|v| from_json(&v))
                    .ok_or_else(|| {
                        ferr(
                            "resource.Get",
                            format!("{res} \"{name}\" not found in namespace \"{ns}\" ({api})"),
                        )
                    })
            }
            "list" => {
                let (api, res, ns) = (text(1), text(2), text(3));
                let items: Vec<Value> = self
                    .data
                    .list(api, res, ns)
                    .iter()
                    .map(|v| from_json(v))
                    .collect();
                Ok(super::super::map(vec![
                    ("apiVersion", s("v1")),
                    ("kind", s("List")),
                    ("items", Value::List(Arc::new(items))),
                ]))
            }
            "global" => {
                let (entry, projection) = (text(1), text(2));
                let projection = (!projection.is_empty()).then_some(projection);
                self.data
                    .global(entry, projection)
                    .map(|v| from_json(&v))
                    .ok_or_else(|| {
                        ferr(
                            "globalContext.Get",
                            format!("global context entry \"{entry}\" not found"),
                        )
                    })
            }
            "image" => {
                let image = text(1);
                self.data
                    .image_data(image)
                    .map(|v| from_json(&v))
                    .map_err(|e| {
                        ferr(
                            "image.GetMetadata",
                            format!("failed to get image data: {e}"),
                        )
                    })
            }
            _ => Err(ferr("data", "unknown lookup")),
        }
    }
}

pub(super) fn data_call<'b, 'v>(
    op: &str,
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    indexer_call(&DATA_TYPE, op, usize::MAX, args)
}

/// A call on a borrowed value of type `ty`: its indexer asked for the key
/// `[op, up to take arguments...]`.
fn indexer_call<'b, 'v>(
    ty: &Type,
    op: &str,
    take: usize,
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let mut it = args.into_iter();
    let target = it
        .next()
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    let mut key = vec![s(op)];
    for a in it.take(take) {
        key.push(Value::try_from(a.as_ref())?);
    }
    let key = Box::<dyn Val>::try_from(Value::List(Arc::new(key)))?;
    let indexer = target
        .as_indexer()
        .filter(|_| target.get_type() == ty)
        .ok_or_else(|| ferr(op, "no such function on this value"))?;
    let out = indexer.get(key.as_ref())?.into_owned();
    Ok(CowVal::Owned(out))
}

/// `globalContext.Get(entry, projection)`, and `http.Get(url, headers)`
/// (the same name and arity).
pub(super) fn data_global<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.first().is_some_and(|t| t.get_type() == &HTTP_TYPE) {
        return http_call("GET", args);
    }
    data_call("global", args)
}

pub(super) static HTTP_TYPE: Type = Type::new_unspecified_type("kyverno.http");

/// `http`: Kyverno's HTTP library, answered by the caller's
/// [`ClusterData::http_call`] (the engine does no I/O). `Client(caBundle)`
/// gives the same client: answers are looked up by method and URL.
#[derive(Debug, Clone, Copy)]
pub(super) struct HttpVal<'a> {
    data: &'a dyn ClusterData,
}

indexer_val!(HttpVal, HTTP_TYPE);

impl Indexer for HttpVal<'_> {
    /// `[method, url, body?]` (headers are not part of the key).
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let key = match Value::try_from(idx)? {
            Value::List(l) => l,
            _ => return Err(ferr("http", "unknown call")),
        };
        let (method, url) = match (key.first(), key.get(1)) {
            (Some(Value::String(m)), Some(Value::String(u))) => (m.to_string(), u.to_string()),
            _ => return Err(ferr("http", "expects a URL string")),
        };
        let function = if method == "POST" {
            "http.Post"
        } else {
            "http.Get"
        };
        let body = match key.get(2) {
            Some(b) if method == "POST" => Some(
                b.json()
                    .map_err(|e| ferr(function, format!("the data is not JSON: {e}")))?,
            ),
            _ => None,
        };
        let answer = self
            .data
            .http_call(&method, &url, body.as_ref())
            .ok_or_else(|| ferr(function, format!("no answer from {url}")))?;
        Ok(CowVal::Owned(Box::<dyn Val>::try_from(from_json(&answer))?))
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

/// One `http` call: the target, the URL, a POST's data; headers ignored.
pub(super) fn http_call<'b, 'v>(
    method: &str,
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    indexer_call(
        &HTTP_TYPE,
        method,
        if method == "POST" { 2 } else { 1 },
        args,
    )
}

/// `http.Client(caBundle)`: the same client.
pub(super) fn http_client<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.first().is_none_or(|t| t.get_type() != &HTTP_TYPE) {
        return Err(ferr("Client", "no such function on this value"));
    }
    Ok(args.swap_remove(0))
}

pub(super) fn data_image<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    data_call("image", args)
}

/// Binds `resource`, `globalContext`, `image` (the variable, beside the
/// `image(ref)` function) and `http` to `data` in `ctx`, and `generator` (with nowhere
/// to put what it generates: see [`bind_generator`]).
pub(crate) fn bind_data<'a>(ctx: &mut Context<'_, 'a>, data: &'a dyn ClusterData) {
    ctx.add_variable_as_val("resource", Box::new(DataVal { data }));
    ctx.add_variable_as_val("globalContext", Box::new(DataVal { data }));
    ctx.add_variable_as_val("image", Box::new(DataVal { data }));
    ctx.add_variable_as_val("http", Box::new(HttpVal { data }));
    bind_envoy(ctx);
    ctx.add_variable_as_val("generator", Box::new(GeneratorVal { sink: None }));
}

/// Binds `generator` so that `generator.Apply` records what it generates
/// in `sink` (a GeneratingPolicy's evaluation).
pub(crate) fn bind_generator<'a>(ctx: &mut Context<'_, 'a>, sink: &'a GeneratedSink) {
    ctx.add_variable_as_val("generator", Box::new(GeneratorVal { sink: Some(sink) }));
}

pub(super) static GENERATOR_TYPE: Type = Type::new_unspecified_type("kyverno.generator");

/// What `generator.Apply` calls asked for, in call order: each call's
/// namespace and objects.
///
/// # Invariants
/// 1. One sink belongs to one evaluation, on one thread; the `Mutex` is
///    there because CEL values must be `Sync`. It is held only to push one
///    call's objects, never across an evaluation, so it is never contended.
pub(crate) type GeneratedSink = std::sync::Mutex<Vec<(String, Vec<serde_json::Value>)>>;

/// `generator`: its one function, `Apply(namespace, objects)`, records the
/// objects in the evaluation's sink and returns true (Kyverno's generator
/// creates them then). Evaluation stays pure: the sink is the caller's,
/// and the GeneratingPolicy evaluator turns it into downstreams.
#[derive(Debug, Clone, Copy)]
pub(super) struct GeneratorVal<'a> {
    sink: Option<&'a GeneratedSink>,
}

indexer_val!(GeneratorVal, GENERATOR_TYPE);

impl Indexer for GeneratorVal<'_> {
    /// `[namespace, objects]`: one `Apply` call.
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        const F: &str = "generator.Apply";
        let Some(sink) = self.sink else {
            return Err(ferr(F, "only a GeneratingPolicy generates resources"));
        };
        let call = match Value::try_from(idx)? {
            Value::List(l) if l.len() == 2 => l,
            _ => return Err(ferr(F, "expects a namespace and a list of objects")),
        };
        let namespace = match &call[0] {
            Value::String(s) => s.to_string(),
            Value::Null => String::new(),
            other => {
                return Err(ferr(
                    F,
                    format!("namespace must be a string, got {}", other.type_of()),
                ));
            }
        };
        let objects = match &call[1] {
            Value::List(items) => items
                .iter()
                .map(|o| {
                    o.json()
                        .map_err(|e| ferr(F, format!("an object is not JSON: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?,
            other => {
                return Err(ferr(
                    F,
                    format!("objects must be a list, got {}", other.type_of()),
                ));
            }
        };
        // A poisoned lock: a push panicked on this thread; the list is
        // still whole.
        sink.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((namespace, objects));
        Ok(CowVal::Owned(Box::<dyn Val>::try_from(Value::Bool(true))?))
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

pub(super) fn generator_apply<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let mut it = args.into_iter();
    let target = it
        .next()
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    let mut call = Vec::new();
    for a in it {
        call.push(Value::try_from(a.as_ref())?);
    }
    let call = Box::<dyn Val>::try_from(Value::List(Arc::new(call)))?;
    let indexer = target
        .as_indexer()
        .filter(|_| target.get_type() == &GENERATOR_TYPE)
        .ok_or_else(|| ferr("Apply", "no such function on this value"))?;
    let out = indexer.get(call.as_ref())?.into_owned();
    Ok(CowVal::Owned(out))
}
