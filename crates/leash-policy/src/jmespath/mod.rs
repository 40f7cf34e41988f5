//! JMESPath with Kyverno's custom functions.

use std::sync::OnceLock;

/// The shared runtime: JMESPath's built-in functions plus Kyverno's.
pub fn runtime() -> &'static jmespath::Runtime {
    static RUNTIME: OnceLock<jmespath::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let mut rt = jmespath::Runtime::new();
        rt.register_builtin_functions();
        rt
    })
}
