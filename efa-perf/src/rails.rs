//! `-d`: which devices a run uses. One device (the first, or `-d NAME`) is what efa-perf
//! always did; `-d all` or `-d efa_0,efa_1,...` makes every bandwidth test run over one
//! set of QPs per device at once (a "rail": its own device, PD, CQ, QPs and buffers, on
//! both ends), reported per rail and in aggregate. Rail `i` of the client talks to rail `i`
//! of the server.

use serde_json::{json, Value};

use crate::res::{self, Device, Res};
use crate::wire;

/// The most rails a run may have (the control protocol's limit, as for `-q`).
pub const MAX_RAILS: usize = 64;

/// `-d`'s value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DeviceSel {
    /// No `-d`: the first EFA device.
    #[default]
    First,
    /// `-d all`: every EFA device, in the order rdma-core lists them.
    All,
    /// `-d NAME[,NAME...]`: these, in this order.
    Named(Vec<String>),
}

impl DeviceSel {
    /// Parses `-d`'s value: `all`, or one or more device names separated by commas (no
    /// empty name, no name twice, at most [`MAX_RAILS`]).
    pub fn parse(v: &str) -> Result<DeviceSel, String> {
        if v == "all" {
            return Ok(DeviceSel::All);
        }
        let mut names: Vec<String> = Vec::new();
        for n in v.split(',') {
            let n = n.trim();
            if n.is_empty() {
                return Err(format!(
                    "-d {v:?}: an empty device name (-d takes all, a name, or names separated by commas)"
                ));
            }
            if n == "all" {
                return Err(format!("-d {v:?}: all stands alone, not in a list"));
            }
            if names.iter().any(|x| x == n) {
                return Err(format!("-d {v:?}: device {n} is named twice"));
            }
            names.push(n.to_string());
        }
        if names.len() > MAX_RAILS {
            return Err(format!(
                "-d {v:?}: {} devices, at most {MAX_RAILS}",
                names.len()
            ));
        }
        Ok(DeviceSel::Named(names))
    }

    /// As `-d`'s value again (`None` for the default).
    pub fn to_arg(&self) -> Option<String> {
        match self {
            DeviceSel::First => None,
            DeviceSel::All => Some("all".into()),
            DeviceSel::Named(n) => Some(n.join(",")),
        }
    }
}

/// Why the devices of `-d` could not be opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// `-d` named a device that does not exist: bad input (exit status 2).
    Unknown {
        /// The name given.
        name: String,
        /// The EFA devices there are.
        known: Vec<String>,
    },
    /// Anything else (no EFA device at all, one that cannot be opened): exit status 1.
    Failed(String),
}

impl OpenError {
    /// The exit status it gets: 2 for a device name that does not exist, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            OpenError::Unknown { .. } => 2,
            OpenError::Failed(_) => 1,
        }
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Unknown { name, known } if known.is_empty() => write!(
                f,
                "no EFA device named {name}: no EFA device at all; {}",
                res::NO_DEVICE_HINT
            ),
            OpenError::Unknown { name, known } => write!(
                f,
                "no EFA device named {name} (EFA devices: {})",
                known.join(", ")
            ),
            OpenError::Failed(e) => f.write_str(e),
        }
    }
}

impl From<OpenError> for String {
    fn from(e: OpenError) -> String {
        e.to_string()
    }
}

/// Opens the devices of `sel` for `backend`, in order: one for [`DeviceSel::First`], at
/// least one otherwise. Every name is checked before any device is opened.
pub fn open(sel: &DeviceSel, backend: efa::Backend) -> Result<Vec<Device>, OpenError> {
    let names = match sel {
        DeviceSel::First => {
            return Device::open(None, backend)
                .map(|d| vec![d])
                .map_err(OpenError::Failed)
        }
        DeviceSel::All => {
            let all = res::efa_names().map_err(OpenError::Failed)?;
            if all.is_empty() {
                return Err(OpenError::Failed(format!(
                    "no EFA device found; {}",
                    res::NO_DEVICE_HINT
                )));
            }
            if all.len() > MAX_RAILS {
                return Err(OpenError::Failed(format!(
                    "-d all: {} EFA devices, efa-perf runs at most {MAX_RAILS} rails (name them with -d)",
                    all.len()
                )));
            }
            all
        }
        DeviceSel::Named(names) => {
            let known = res::efa_names().map_err(OpenError::Failed)?;
            if let Some(bad) = names.iter().find(|n| !known.contains(n)) {
                return Err(OpenError::Unknown {
                    name: bad.clone(),
                    known,
                });
            }
            names.clone()
        }
    };
    names
        .iter()
        .map(|n| Device::open(Some(n), backend).map_err(OpenError::Failed))
        .collect()
}

/// The names of `devs`, separated by `sep`.
pub fn names(devs: &[Device], sep: &str) -> String {
    let v: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
    v.join(sep)
}

/// The first line of a run on `devs`: the device's banner, or with several
/// `efa-perf ... on 4 devices (efa_0, efa_1, efa_2, efa_3): ...` (the first one's firmware
/// and data path; all of one kind on one instance).
pub fn banner(devs: &[Device]) -> String {
    match devs {
        [] => String::new(),
        [one] => one.banner(),
        [first, ..] => first.banner_on(&format!("{} devices ({})", devs.len(), names(devs, ", "))),
    }
}

/// What the peer needs to know of this end's devices (part of the hello): the first
/// device's fields, as with one device, and with several a `rails` array of each one's.
pub fn hello_json(devs: &[Device]) -> Value {
    let mut v = devs
        .first()
        .map(Device::to_json)
        .unwrap_or_else(|| json!({}));
    if devs.len() > 1 {
        v["rails"] = Value::Array(devs.iter().map(Device::to_json).collect());
    }
    v
}

/// The peer's devices from its hello: its `rails`, or the hello itself (one device).
pub fn peer_rails(peer: &Value) -> Vec<&Value> {
    match peer.get("rails").and_then(Value::as_array) {
        Some(r) if !r.is_empty() => r.iter().collect(),
        _ => vec![peer],
    }
}

/// One end's endpoints and remote buffers of every rail, as a message: as with one
/// device for one rail, `{"rails": [...]}` for several.
pub fn res_json(rails: &[Res]) -> Value {
    match rails {
        [one] => one.to_json(),
        _ => json!({ "rails": rails.iter().map(Res::to_json).collect::<Vec<_>>() }),
    }
}

/// Connects rail `i` of `rails` to rail `i` of the peer's [`res_json`].
pub fn connect(rails: &mut [Res], v: &Value) -> Result<(), String> {
    if let [one] = rails {
        return one.connect(v);
    }
    let theirs = v
        .get("rails")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("malformed control message: no rails in {v}"))?;
    if theirs.len() != rails.len() {
        return Err(format!(
            "the peer set up {} rails, this end {}",
            theirs.len(),
            rails.len()
        ));
    }
    for (res, peer) in rails.iter_mut().zip(theirs) {
        let name = res.rail.clone().unwrap_or_default();
        res.connect(peer).map_err(|e| format!("rail {name}: {e}"))?;
    }
    Ok(())
}

/// The client's `done` message of a bandwidth size: the messages of every rail, and with
/// several rails each one's.
pub fn done_json(counts: &[u64]) -> Value {
    let total: u64 = counts.iter().sum();
    match counts {
        [_] => json!({ "done": total }),
        _ => json!({ "done": total, "rails": counts }),
    }
}

/// The per-rail counts of a [`done_json`] for `n` rails: its `rails` (as many numbers as
/// rails, adding up to `done`), or `[done]` for one rail.
pub fn done_counts(v: &Value, n: usize) -> Result<Vec<u64>, String> {
    let done = wire::u64_of(v, "done")?;
    if n == 1 {
        return Ok(vec![done]);
    }
    let counts: Option<Vec<u64>> = v
        .get("rails")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
        .unwrap_or(None);
    let sum = counts
        .as_ref()
        .and_then(|c| c.iter().try_fold(0u64, |a, &x| a.checked_add(x)));
    match counts {
        Some(c) if c.len() == n && sum == Some(done) => Ok(c),
        _ => Err(format!(
            "malformed control message: the done of {n} rails needs {n} counts adding up to {done}, got {v}"
        )),
    }
}

/// One rail's share of a size, as measured by the client.
#[derive(Clone, Debug, PartialEq)]
pub struct RailStat {
    /// This end's device.
    pub device: String,
    /// The server's device of the same rail.
    pub peer_device: String,
    /// Messages completed.
    pub msgs: u64,
    /// Bytes moved (`msgs` × the size).
    pub bytes: u64,
    /// Gigabytes (10^9 bytes) per second, over the size's whole time.
    pub gbps: f64,
    /// Million messages per second, over the size's whole time.
    pub mmps: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_lists_parse_and_refuse_what_cannot_be_meant() {
        assert_eq!(DeviceSel::parse("all"), Ok(DeviceSel::All));
        assert_eq!(
            DeviceSel::parse("efa_0"),
            Ok(DeviceSel::Named(vec!["efa_0".into()]))
        );
        assert_eq!(
            DeviceSel::parse("efa_1, efa_0"),
            Ok(DeviceSel::Named(vec!["efa_1".into(), "efa_0".into()]))
        );
        assert!(DeviceSel::parse("efa_0,,efa_1")
            .unwrap_err()
            .contains("an empty device name"));
        assert!(DeviceSel::parse("").unwrap_err().contains("empty"));
        assert!(DeviceSel::parse("efa_0,efa_0")
            .unwrap_err()
            .contains("efa_0 is named twice"));
        assert!(DeviceSel::parse("all,efa_0")
            .unwrap_err()
            .contains("stands alone"));
        let many: Vec<String> = (0..65).map(|i| format!("efa_{i}")).collect();
        assert!(DeviceSel::parse(&many.join(","))
            .unwrap_err()
            .contains("65 devices, at most 64"));
        assert_eq!(
            DeviceSel::parse("efa_2,efa_3").unwrap().to_arg().as_deref(),
            Some("efa_2,efa_3")
        );
        assert_eq!(DeviceSel::All.to_arg().as_deref(), Some("all"));
        assert_eq!(DeviceSel::First.to_arg(), None);
    }

    #[test]
    fn unknown_names_are_bad_input() {
        let e = OpenError::Unknown {
            name: "efa_9".into(),
            known: vec!["efa_0".into(), "efa_1".into()],
        };
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.to_string(),
            "no EFA device named efa_9 (EFA devices: efa_0, efa_1)"
        );
        assert_eq!(OpenError::Failed("x".into()).exit_code(), 1);
    }

    #[test]
    fn done_counts_add_up_or_are_refused() {
        assert_eq!(done_counts(&done_json(&[7]), 1), Ok(vec![7]));
        assert_eq!(done_json(&[7]), json!({"done": 7}));
        assert_eq!(done_counts(&done_json(&[3, 4]), 2), Ok(vec![3, 4]));
        let bad = [
            json!({"done": 8, "rails": [3, 4]}),
            json!({"done": 7, "rails": [3, 4, 0]}),
            json!({"done": 7}),
            json!({"done": 7, "rails": [3, -4]}),
            json!({"done": 1, "rails": [u64::MAX, 2]}),
        ];
        for v in bad {
            let e = done_counts(&v, 2).unwrap_err();
            assert!(e.contains("needs 2 counts adding up to"), "{v}: {e}");
        }
        assert!(done_counts(&json!({"rails": [1, 2]}), 2).is_err());
    }

    #[test]
    fn a_hello_without_rails_is_one_device() {
        let one = json!({"device": "efa_0"});
        assert_eq!(peer_rails(&one).len(), 1);
        let two = json!({"device": "efa_0", "rails": [{"device": "efa_0"}, {"device": "efa_1"}]});
        let r = peer_rails(&two);
        assert_eq!((r.len(), &r[1]["device"]), (2, &json!("efa_1")));
    }
}
