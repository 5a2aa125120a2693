//! `--backend`: which data path this end's QPs and CQs use.

/// `--backend`'s value.
pub fn parse_backend(v: &str) -> Result<efa::Backend, String> {
    match v {
        "auto" => Ok(efa::Backend::Auto),
        "direct" => Ok(efa::Backend::Direct),
        "provider" => Ok(efa::Backend::Provider),
        _ => Err(format!("--backend {v:?}: must be auto, direct or provider")),
    }
}

/// `--backend`'s name for `b`.
pub fn backend_name(b: efa::Backend) -> &'static str {
    match b {
        efa::Backend::Auto => "auto",
        efa::Backend::Direct => "direct",
        efa::Backend::Provider => "provider",
    }
}
