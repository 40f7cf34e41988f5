//! CEL: `validate.cel` of classic rules, with Kubernetes' and Kyverno's CEL
//! libraries.
