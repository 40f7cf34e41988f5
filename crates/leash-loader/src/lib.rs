//! leash-loader (under construction).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
