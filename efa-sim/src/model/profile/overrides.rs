//! The `EFA_SIM_PROFILE` syntax (see [`super`]): `key=value` items, `caps` edits, files,
//! per-device items.

use super::{
    validate, Profile, CAP_CQ_WITH_SGID, CAP_RDMA_READ, CAP_RDMA_WRITE, CAP_RNR_RETRY,
    CAP_UNSOLICITED_WRITE_RECV, PROFILE_KEYS,
};

/// Names accepted in `caps=` lists.
const CAP_NAMES: &[(&str, u32)] = &[
    ("rdma_read", CAP_RDMA_READ),
    ("rnr_retry", CAP_RNR_RETRY),
    ("cq_with_sgid", CAP_CQ_WITH_SGID),
    ("rdma_write", CAP_RDMA_WRITE),
    ("unsolicited_write_recv", CAP_UNSOLICITED_WRITE_RECV),
];

fn parse_u64(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let parsed = if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16)
    } else {
        v.parse::<u64>()
    };
    parsed.map_err(|_| "must be a number (decimal or 0x hex)".to_string())
}

/// A number that fits the unsigned field type `T`.
fn parse_num<T: TryFrom<u64>>(v: &str) -> Result<T, String> {
    let n = parse_u64(v)?;
    let bits = 8 * std::mem::size_of::<T>() as u32;
    let max = u64::MAX.checked_shr(64 - bits).unwrap_or(u64::MAX);
    T::try_from(n).map_err(|_| format!("must be a number 0..={max}"))
}

fn parse_bool(v: &str) -> Result<bool, String> {
    crate::config::parse_switch(v)
        .ok_or_else(|| format!("must be {}", crate::config::SWITCH_SPELLINGS))
}

/// `caps=` value: a number; a `|`-list of names (replaces the set); or a list
/// of `+name` / `-name` items (edits the current set), e.g. `-rdma_write+rdma_read`.
fn parse_caps(current: u32, v: &str) -> Result<u32, String> {
    let v = v.trim();
    if v.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_num::<u32>(v);
    }
    let relative = v.starts_with(['+', '-']);
    let mut caps = if relative { current } else { 0 };
    let mut sign = '+';
    let mut name = String::new();
    let flush = |sign: char, name: &mut String, caps: &mut u32| -> Result<(), String> {
        let n = name.trim();
        if n.is_empty() {
            return Ok(());
        }
        let bit = CAP_NAMES
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, b)| *b)
            .ok_or_else(|| {
                let names: Vec<&str> = CAP_NAMES.iter().map(|(k, _)| *k).collect();
                format!("unknown capability `{n}` (known: {})", names.join(", "))
            })?;
        if sign == '-' {
            *caps &= !bit;
        } else {
            *caps |= bit;
        }
        name.clear();
        Ok(())
    };
    for c in v.chars() {
        match c {
            '+' | '-' | '|' => {
                flush(sign, &mut name, &mut caps)?;
                sign = if c == '-' { '-' } else { '+' };
            }
            _ => name.push(c),
        }
    }
    flush(sign, &mut name, &mut caps)?;
    Ok(caps)
}

/// Applies one `key=value` to `p`. The error says what the value must be (the caller
/// names the item).
pub fn apply(p: &mut Profile, key: &str, value: &str) -> Result<(), String> {
    let v = value;
    match key {
        "vendor_id" => p.vendor_id = parse_num(v)?,
        "vendor_part_id" => p.vendor_part_id = parse_num(v)?,
        "hw_ver" => p.hw_ver = parse_num(v)?,
        "fw_ver" => {
            let v = v.trim();
            if !v.starts_with("efa-sim") {
                return Err(
                    "must start with \"efa-sim\" (device selection relies on it)".to_string(),
                );
            }
            p.fw_ver = v.to_string();
        }
        "node_guid" => p.node_guid = parse_num(v)?,
        "caps" | "device_caps" => p.device_caps = parse_caps(p.device_caps, v)?,
        "cq_notifications" => p.cq_notifications = parse_bool(v)?,
        "max_sq_wr" => p.max_sq_wr = parse_num(v)?,
        "max_rq_wr" => p.max_rq_wr = parse_num(v)?,
        "max_sq_sge" => p.max_sq_sge = parse_num(v)?,
        "max_rq_sge" => p.max_rq_sge = parse_num(v)?,
        "max_sge_rd" => p.max_sge_rd = parse_num(v)?,
        "inline_buf_size" => p.inline_buf_size = parse_num(v)?,
        "inline_buf_size_ex" => p.inline_buf_size_ex = parse_num(v)?,
        "max_rdma_size" => p.max_rdma_size = parse_num(v)?,
        "mtu_bytes" => p.mtu_bytes = parse_num(v)?,
        "max_qp" => p.max_qp = parse_num(v)?,
        "max_cq" => p.max_cq = parse_num(v)?,
        "max_cqe" => p.max_cqe = parse_num(v)?,
        "max_mr" => p.max_mr = parse_num(v)?,
        "max_pd" => p.max_pd = parse_num(v)?,
        "max_ah" => p.max_ah = parse_num(v)?,
        "max_mr_size" => p.max_mr_size = parse_num(v)?,
        "page_size_cap" => p.page_size_cap = parse_num(v)?,
        "max_llq_size" => p.max_llq_size = parse_num(v)?,
        "max_tx_batch" => p.max_tx_batch = parse_num(v)?,
        "min_sq_wr" => p.min_sq_wr = parse_num(v)?,
        "link_gbps" => p.link_gbps = parse_num(v)?,
        "num_comp_vectors" => p.num_comp_vectors = parse_num(v)?,
        "peer_timeout_ms" => p.peer_timeout_ms = parse_num(v)?,
        "sub_cqs_per_cq" => p.sub_cqs_per_cq = parse_num(v)?,
        "read_completes_as_send" => p.read_completes_as_send = parse_bool(v)?,
        "read_opcode" => p.read_completes_as_send = parse_read_opcode(v)?,
        "dmabuf_mr" => p.dmabuf_mr = parse_bool(v)?,
        "ring_query" => p.ring_query = parse_bool(v)?,
        "mmio_trap" => p.mmio_trap = parse_bool(v)?,
        "direct_calls" => p.direct_calls = parse_bool(v)?,
        "peermem" => p.peermem = parse_bool(v)?,
        "strict" => p.strict = parse_bool(v)?,
        _ => {
            return Err(format!(
                "unknown profile key (known: {}, device_caps, read_opcode)",
                PROFILE_KEYS.join(", ")
            ))
        }
    }
    Ok(())
}

/// `send` → true (rdma-core fidelity), `rdma_read` → false.
pub fn parse_read_opcode(v: &str) -> Result<bool, String> {
    match v.trim() {
        "send" => Ok(true),
        "rdma_read" => Ok(false),
        _ => Err("must be send or rdma_read".to_string()),
    }
}

/// Parsed `EFA_SIM_PROFILE`: overrides for all devices, then per device.
#[derive(Debug, Default)]
pub struct Overrides {
    items: Vec<(Option<u32>, String, String)>,
}

impl Overrides {
    /// Parses the list syntax: items separated by `,`, `;` or newlines; `#` starts a comment.
    pub fn parse(text: &str) -> Result<Overrides, String> {
        let mut items = Vec::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            for item in line
                .split([',', ';'])
                .map(str::trim)
                .filter(|s| !s.is_empty())
            {
                let shown = crate::config::shown(item);
                // `strict` alone is `strict=1` (the adversarial preset).
                let (k, v) = match item {
                    "strict" => ("strict", "1"),
                    _ => item
                        .split_once('=')
                        .ok_or_else(|| format!("`{shown}`: must be key=value"))?,
                };
                let k = k.trim();
                let (dev, key) = match k.split_once('.') {
                    Some((d, key)) => {
                        let idx = d
                            .strip_prefix("efa_")
                            .and_then(|n| n.parse::<u32>().ok())
                            .ok_or_else(|| {
                                format!("`{shown}`: the device prefix must be efa_<N>")
                            })?;
                        (Some(idx), key)
                    }
                    None => (None, k),
                };
                // Check the key and value now, so errors name the item.
                apply(&mut Profile::default(), key, v).map_err(|m| format!("`{shown}`: {m}"))?;
                items.push((dev, key.to_string(), v.to_string()));
            }
        }
        Ok(Overrides { items })
    }

    /// Reads `EFA_SIM_PROFILE`: a value containing `=` (or the word `strict`) is an
    /// inline list, anything else is the path of a file holding the list.
    pub fn from_env_value(value: &str) -> Result<Overrides, String> {
        if value.contains('=') || value.trim() == "strict" {
            Overrides::parse(value)
        } else {
            let text = std::fs::read_to_string(value).map_err(|e| {
                let shown = crate::config::shown(value);
                format!("`{shown}`: must be a key=value list or the path of a readable file ({e})")
            })?;
            Overrides::parse(&text).map_err(|m| format!("{}: {m}", crate::config::shown(value)))
        }
    }

    /// The profile of device `index`: defaults, global items, then `efa_<index>.` items.
    pub fn profile_for(&self, index: u32, base: &Profile) -> Result<Profile, String> {
        let mut p = base.clone();
        for (dev, k, v) in &self.items {
            if dev.is_none() {
                apply(&mut p, k, v).map_err(|m| format!("`{k}={v}`: {m}"))?;
            }
        }
        for (dev, k, v) in &self.items {
            if *dev == Some(index) {
                apply(&mut p, k, v).map_err(|m| format!("`efa_{index}.{k}={v}`: {m}"))?;
            }
        }
        validate(&p).map_err(|m| format!("efa_{index}: {m}"))?;
        Ok(p)
    }

    /// Largest device index named by a per-device item.
    pub fn max_device(&self) -> Option<u32> {
        self.items.iter().filter_map(|(d, _, _)| *d).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_model() {
        let p = Profile::default();
        assert_eq!(p.device_caps, 0x1f);
        assert!(p.fw_ver.starts_with("efa-sim"));
        assert_eq!(p.max_llq_size / 64, 4096);
        validate(&p).unwrap();
    }

    #[test]
    fn inline_list_overrides_fields() {
        let o = Overrides::parse("max_rdma_size=65536,caps=-rdma_write,max_sq_wr=16").unwrap();
        let p = o.profile_for(0, &Profile::default()).unwrap();
        assert_eq!(p.max_rdma_size, 65536);
        assert_eq!(p.device_caps, 0x1f & !CAP_RDMA_WRITE);
        assert_eq!(p.max_sq_wr, 16);
    }

    #[test]
    fn caps_absolute_and_numeric() {
        let o = Overrides::parse("caps=rdma_read|rnr_retry").unwrap();
        assert_eq!(
            o.profile_for(0, &Profile::default()).unwrap().device_caps,
            3
        );
        let o = Overrides::parse("caps=0x8").unwrap();
        assert_eq!(
            o.profile_for(0, &Profile::default()).unwrap().device_caps,
            8
        );
        let o = Overrides::parse("caps=+rdma_read-rdma_write").unwrap();
        assert_eq!(
            o.profile_for(0, &Profile::default()).unwrap().device_caps,
            0x17
        );
    }

    #[test]
    fn per_device_override_only_touches_that_device() {
        let o = Overrides::parse("efa_1.max_rdma_size=4096\nmax_qp=100 # comment").unwrap();
        let p0 = o.profile_for(0, &Profile::default()).unwrap();
        let p1 = o.profile_for(1, &Profile::default()).unwrap();
        assert_eq!(p0.max_rdma_size, 1 << 30);
        assert_eq!(p1.max_rdma_size, 4096);
        assert_eq!(p0.max_qp, 100);
        assert_eq!(p1.max_qp, 100);
    }

    #[test]
    fn profile_file_is_read_and_a_missing_one_is_named() {
        let path = std::env::temp_dir().join(format!("efa-sim-profile-{}.txt", std::process::id()));
        std::fs::write(
            &path,
            "# small device\nmax_rdma_size=8192\ncaps=-rdma_write\nefa_1.max_sq_wr=32\n",
        )
        .unwrap();
        let o = Overrides::from_env_value(path.to_str().unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        let p0 = o.profile_for(0, &Profile::default()).unwrap();
        let p1 = o.profile_for(1, &Profile::default()).unwrap();
        assert_eq!(p0.max_rdma_size, 8192);
        assert_eq!(p0.device_caps & CAP_RDMA_WRITE, 0);
        assert_eq!(
            (p0.max_sq_wr, p1.max_sq_wr),
            (Profile::default().max_sq_wr, 32)
        );
        let err = Overrides::from_env_value("/nonexistent/efa-sim.profile").unwrap_err();
        assert!(err.contains("/nonexistent/efa-sim.profile"), "{err}");
    }

    #[test]
    fn strict_is_a_word_and_a_key_and_combines() {
        let p = |v: &str| {
            Overrides::from_env_value(v)
                .unwrap()
                .profile_for(0, &Profile::default())
                .unwrap()
        };
        assert!(!Profile::default().strict);
        assert!(p("strict").strict);
        assert!(p("strict=1").strict);
        let both = p("strict,max_sq_wr=16");
        assert!(both.strict && both.max_sq_wr == 16);
        assert!(!p("strict,strict=0").strict);
    }

    #[test]
    fn malformed_items_are_rejected_with_a_reason() {
        let err = Overrides::parse("max_sq_wr=lots").unwrap_err();
        assert!(err.contains("max_sq_wr"), "{err}");
        let err = Overrides::parse("no_such_key=1").unwrap_err();
        assert!(err.contains("unknown profile key"), "{err}");
        let err = Overrides::parse("max_sq_wr").unwrap_err();
        assert!(err.contains("key=value"), "{err}");
        let err = Overrides::parse("caps=-teleport").unwrap_err();
        assert!(err.contains("teleport"), "{err}");
        let err = Overrides::parse("fw_ver=real").unwrap_err();
        assert!(err.contains("efa-sim"), "{err}");
        let err = Overrides::parse("max_sq_sge=99")
            .unwrap()
            .profile_for(0, &Profile::default())
            .unwrap_err();
        assert!(err.contains("max_sq_sge"), "{err}");
    }
}
