//! Process slots and owner records (see the [module docs](super), "Addressing" and
//! "Owner records"): a process claims one slot per lock directory with `flock` and keeps
//! an owner record next to it naming its pid, start time, pid namespace and bound
//! addresses.

use super::SLOTS;
use crate::config::MAX_DEVICES;
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// A slot this process holds: the lock file stays open (and locked) until exit.
struct Claim {
    dir: PathBuf,
    slot: u32,
    _lock: std::fs::File,
    /// Every address this process has bound under this claim.
    bound: Vec<SocketAddrV4>,
}

/// This process's claims, one per lock directory used.
static CLAIMS: Mutex<Vec<Claim>> = Mutex::new(Vec::new());

/// This process's slot under `dir`, claimed on first use (held until exit).
pub fn process_slot(dir: &Path) -> Result<u32, String> {
    let mut claims = CLAIMS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = claims.iter().find(|c| c.dir == dir) {
        return Ok(c.slot);
    }
    let (slot, lock) = claim_slot(dir)?;
    claims.push(Claim {
        dir: dir.to_path_buf(),
        slot,
        _lock: lock,
        bound: Vec::new(),
    });
    Ok(slot)
}

fn claim_slot(dir: &Path) -> Result<(u32, std::fs::File), String> {
    let shown = dir.display();
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create lock dir {shown}: {e}"))?;
    // Start at a pid-dependent slot so a slot (and its QPNs) is rarely reused
    // right after its process died.
    let first = std::process::id() % SLOTS;
    for slot in (0..SLOTS).map(|i| (first + i) % SLOTS) {
        let path = dir.join(format!("slot-{slot}"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        // SAFETY: flock on a valid, owned fd; non-blocking.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            // Records and inbox pointers left by a dead holder must not survive into our
            // tenure; nor those of other slots nobody holds.
            remove_slot_files(dir, slot);
            sweep_dir(dir, slot);
            return Ok((slot, file));
        }
    }
    Err(format!(
        "all {SLOTS} process slots under {shown} are in use"
    ))
}

/// Removes the owner record and inbox pointer files of `slot` (its lock is held).
fn remove_slot_files(dir: &Path, slot: u32) {
    let _ = std::fs::remove_file(owner_path(dir, slot));
    for dev in 0..MAX_DEVICES {
        let _ = std::fs::remove_file(super::shm::inbox_path(dir, slot, dev));
    }
}

/// Sweeps every slot other than `ours` that has inbox files under `dir`.
fn sweep_dir(dir: &Path, ours: u32) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut seen = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let slot = name
            .to_str()
            .and_then(|n| n.strip_prefix("slot-"))
            .and_then(|n| n.split_once(".dev-"))
            .filter(|(_, rest)| rest.ends_with(".inbox"))
            .and_then(|(s, _)| s.parse::<u32>().ok());
        if let Some(s) = slot.filter(|s| *s != ours && *s < SLOTS && !seen.contains(s)) {
            seen.push(s);
            sweep_unclaimed(dir, s);
        }
    }
}

/// Removes the files of `slot` under `dir` if nobody holds it (its process died): the
/// sweeper takes the slot's lock for the moment it removes them, so a process claiming
/// the slot meanwhile simply takes another.
pub fn sweep_slot(dir: &Path, slot: u32) {
    let held_here = CLAIMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|c| c.dir == dir && c.slot == slot);
    if !held_here {
        sweep_unclaimed(dir, slot);
    }
}

/// [`sweep_slot`] of a slot this process does not hold under `dir`.
fn sweep_unclaimed(dir: &Path, slot: u32) {
    let Ok(file) = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(format!("slot-{slot}")))
    else {
        return;
    };
    // SAFETY: flock on a valid, owned fd; non-blocking.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        remove_slot_files(dir, slot);
    }
}

/// Files this process removes when it exits normally (its inbox pointers), with the pid
/// that registered them (a forked child that exits must not remove its parent's).
static AT_EXIT: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

extern "C" fn remove_exit_files() {
    let me = std::process::id();
    // try_lock: an exit from inside a holder of the lock must not deadlock.
    if let Ok(paths) = AT_EXIT.try_lock() {
        for (_, p) in paths.iter().filter(|(pid, _)| *pid == me) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Removes `path` when this process exits normally (a killed process leaves it to
/// [`sweep_slot`]).
pub fn remove_at_exit(path: &Path) {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain extern "C" function with no preconditions.
    REGISTER.call_once(|| unsafe {
        libc::atexit(remove_exit_files);
    });
    AT_EXIT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((std::process::id(), path.to_path_buf()));
}

/// Forgets an earlier [`remove_at_exit`] of `path`.
pub fn keep_at_exit(path: &Path) {
    AT_EXIT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(_, p)| p != path);
}

fn owner_path(dir: &Path, slot: u32) -> PathBuf {
    dir.join(format!("slot-{slot}.owner"))
}

/// Adds `addr` to the addresses this process's record under `dir` lists, and rewrites the
/// record. Peers trust process_vm_* requests from `addr` only once the record names it, so
/// a failure only keeps them on the datagram path.
pub fn publish_bound(dir: &Path, addr: SocketAddrV4) {
    let mut claims = CLAIMS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = claims.iter_mut().find(|c| c.dir == dir) else {
        return;
    };
    c.bound.push(addr);
    let _ = publish_owner(c);
}

/// What a slot's owner record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotOwner {
    /// The slot.
    pub slot: u32,
    /// Pid of the holder (in its pid namespace).
    pub pid: u32,
    /// Start time of that pid (field 22 of `/proc/<pid>/stat`).
    pub start: u64,
    /// Inode of the holder's pid namespace.
    pub pidns: u64,
    /// Every address the holder has bound.
    pub bound: Vec<SocketAddrV4>,
}

/// Start time (clock ticks after boot) of process `pid`, from `/proc`.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first one after ')'; start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Inode of this process's pid namespace.
pub fn own_pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    static NS: OnceLock<Option<u64>> = OnceLock::new();
    *NS.get_or_init(|| std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino()))
}

/// Rewrites this process's owner record of `claim` (write to a private file, rename).
fn publish_owner(claim: &Claim) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let pid = std::process::id();
    let start = process_start_time(pid).ok_or(io::ErrorKind::NotFound)?;
    let pidns = own_pid_namespace().ok_or(io::ErrorKind::NotFound)?;
    let list: Vec<String> = claim.bound.iter().map(|a| a.to_string()).collect();
    let text = format!(
        "efa-sim-owner slot={} pid={pid} start={start} pidns={pidns} bound={} end\n",
        claim.slot,
        list.join(",")
    );
    let path = owner_path(&claim.dir, claim.slot);
    let tmp = claim
        .dir
        .join(format!("slot-{}.owner.{pid}.tmp", claim.slot));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, &path)
}

/// The owner record of `slot` under `dir`, if one exists that this user wrote (owned by
/// our effective uid, writable by nobody else) and parses completely.
pub fn read_owner(dir: &Path, slot: u32) -> Option<SlotOwner> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut f = std::fs::File::open(owner_path(dir, slot)).ok()?;
    let meta = f.metadata().ok()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != euid || meta.mode() & 0o022 != 0 || meta.len() > 8192 {
        return None;
    }
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    parse_owner(&text)
}

fn parse_owner(text: &str) -> Option<SlotOwner> {
    let line = text.strip_suffix(" end\n")?;
    let mut words = line.split(' ');
    if words.next()? != "efa-sim-owner" {
        return None;
    }
    let mut field = |key: &str| -> Option<&str> { words.next()?.strip_prefix(key) };
    let slot = field("slot=")?.parse().ok()?;
    let pid = field("pid=")?.parse().ok()?;
    let start = field("start=")?.parse().ok()?;
    let pidns = field("pidns=")?.parse().ok()?;
    let bound = field("bound=")?;
    let bound = if bound.is_empty() {
        Vec::new()
    } else {
        bound
            .split(',')
            .map(|a| a.parse().ok())
            .collect::<Option<Vec<SocketAddrV4>>>()?
    };
    if words.next().is_some() {
        return None;
    }
    Some(SlotOwner {
        slot,
        pid,
        start,
        pidns,
        bound,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_record_round_trip_and_rejects() {
        let ok = "efa-sim-owner slot=5 pid=42 start=99 pidns=7 bound=127.0.0.1:47005,10.0.0.1:47133 end\n";
        let o = parse_owner(ok).unwrap();
        assert_eq!((o.slot, o.pid, o.start, o.pidns), (5, 42, 99, 7));
        assert_eq!(
            o.bound,
            vec![
                "127.0.0.1:47005".parse().unwrap(),
                "10.0.0.1:47133".parse().unwrap()
            ]
        );
        assert_eq!(
            parse_owner("efa-sim-owner slot=5 pid=42 start=99 pidns=7 bound= end\n")
                .unwrap()
                .bound,
            vec![]
        );
        // Truncated, extended or garbled records prove nothing.
        assert!(parse_owner(&ok[..ok.len() - 5]).is_none());
        assert!(parse_owner("efa-sim-owner slot=5 pid=4x start=99 pidns=7 bound= end\n").is_none());
        assert!(
            parse_owner("efa-sim-owner slot=5 pid=42 start=99 pidns=7 bound= x end\n").is_none()
        );
        assert!(
            parse_owner("efa-sim-owner slot=5 pid=42 start=99 pidns=7 bound=1.2.3.4 end\n")
                .is_none()
        );
    }

    #[test]
    fn start_time_of_this_process_is_stable() {
        let pid = std::process::id();
        let a = process_start_time(pid).unwrap();
        assert_eq!(process_start_time(pid), Some(a));
        assert!(own_pid_namespace().is_some());
    }

    #[test]
    fn one_slot_per_lock_dir_and_record_lists_bound_addresses() {
        let dir = std::env::temp_dir().join(format!("efa-sim-slots-test-{}", std::process::id()));
        let slot = process_slot(&dir).unwrap();
        assert_eq!(process_slot(&dir).unwrap(), slot);
        let addr: SocketAddrV4 = "127.0.0.1:1".parse().unwrap();
        publish_bound(&dir, addr);
        let rec = read_owner(&dir, slot).expect("owner record");
        assert_eq!((rec.slot, rec.pid), (slot, std::process::id()));
        assert_eq!(rec.bound, vec![addr]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
