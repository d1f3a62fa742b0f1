//! What a node changes on the machine it runs on, and how each change is undone: the one
//! lock nodes of every test binary share, the kernel settings kubelet sets globally, the
//! node's cgroups in every hierarchy, the mounts under its directory and the paths kubelet
//! hard-codes. Also the witness of the connections a node's containers open.

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Error;
use crate::process::{alive, signal};

/// The kernel settings kubelet changes for the whole machine (and checks), saved before the
/// first node of a run starts and restored after the last one stops.
const SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// Where every node's lock and saved settings live (shared by all test binaries).
fn base() -> PathBuf {
    std::env::temp_dir().join("kubesync-testenv")
}

/// The prefix of every node's cgroup name: `kubesync-node-<pid>-<n>`.
pub(crate) const CGROUP_PREFIX: &str = "kubesync-node-";

/// The machine while nodes of this process run on it: the lock that keeps the nodes of other
/// test binaries off it, and the settings to restore. One per process, shared by its nodes.
struct Held {
    nodes: usize,
    lock: Option<std::fs::File>,
    created: Vec<PathBuf>,
}

static HELD: Mutex<Held> = Mutex::new(Held {
    nodes: 0,
    lock: None,
    created: Vec::new(),
});

/// A node's claim on the machine; the last one dropped restores it.
pub(crate) struct HostGuard(());

impl HostGuard {
    /// Claims the machine for one more node of this process. The first claim waits for the
    /// nodes of other processes to stop (a file lock), undoes what a killed run left behind,
    /// and saves the kernel settings.
    pub(crate) fn enter() -> Result<HostGuard, Error> {
        let mut held = HELD.lock();
        if held.nodes == 0 {
            std::fs::create_dir_all(base())
                .map_err(|e| Error::Io(format!("mkdir {}", base().display()), e))?;
            held.lock = Some(lock_file(&base().join("node.lock"))?);
            clean_stale()?;
            save_sysctls()?;
            held.created = ["/var/log/containers", "/var/lib/kubelet"]
                .into_iter()
                .map(PathBuf::from)
                .filter(|p| !p.exists())
                .collect();
        }
        held.nodes += 1;
        Ok(HostGuard(()))
    }
}

impl Drop for HostGuard {
    fn drop(&mut self) {
        let mut held = HELD.lock();
        held.nodes -= 1;
        if held.nodes == 0 {
            let _ = std::fs::remove_file("/var/lib/kubelet/device-plugins/kubelet.sock");
            let _ =
                std::fs::remove_file("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint");
            for dir in std::mem::take(&mut held.created) {
                let _ = std::fs::remove_dir(dir.join("device-plugins"));
                let _ = std::fs::remove_dir(&dir);
            }
            restore_sysctls();
            held.lock = None;
        }
    }
}

/// Opens `path` and takes an exclusive `flock` on it, waiting as long as another process
/// holds it (the lock ends with the file or the process).
fn lock_file(path: &Path) -> Result<std::fs::File, Error> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| Error::Io(format!("open {}", path.display()), e))?;
    // SAFETY: flock(2) on a descriptor this function owns; no memory is shared.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    if rc != 0 {
        return Err(Error::Io(
            format!("flock {}", path.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(file)
}

fn saved_sysctls() -> PathBuf {
    base().join("node-sysctl.before")
}

/// Saves the settings, unless a file saved by a run that never restored it is there: then
/// that run's values are the machine's own, and they stay the ones to restore.
fn save_sysctls() -> Result<(), Error> {
    let path = saved_sysctls();
    if path.exists() {
        return Ok(());
    }
    let mut text = String::new();
    for key in SYSCTLS {
        if let Ok(v) = std::fs::read_to_string(Path::new("/proc/sys").join(key)) {
            text.push_str(&format!("{key}={}\n", v.trim()));
        }
    }
    std::fs::write(&path, text).map_err(|e| Error::Io(format!("write {}", path.display()), e))
}

fn restore_sysctls() {
    let path = saved_sysctls();
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    for (key, value) in text.lines().filter_map(|l| l.split_once('=')) {
        let file = Path::new("/proc/sys").join(key);
        if std::fs::read_to_string(&file).is_ok_and(|v| v.trim() != value) {
            let _ = std::fs::write(&file, value);
        }
    }
    let _ = std::fs::remove_file(path);
}

/// The cgroup hierarchies: each v1 controller's mount (and the v1 `unified` cgroup2 mount
/// beside them), or the one cgroup2 root.
pub(crate) fn hierarchies() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_path_buf()];
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut found: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && matches!(f[2], "cgroup" | "cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .filter(|p| p.starts_with(root))
        .collect();
    found.sort();
    found.dedup();
    found
}

/// The hierarchy whose `cgroup.procs` tells every process of a node (containers, shims,
/// containerd, kubelet): `pids` on cgroup v1, the root on v2.
pub(crate) fn tracking() -> PathBuf {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        root.to_path_buf()
    } else {
        root.join("pids")
    }
}

/// Creates the cgroup `name` (and `name/runtime`, where the node's own processes go) in every
/// hierarchy; a new v1 cpuset gets its parent's CPUs and memory nodes.
pub(crate) fn create_cgroup(name: &str) -> Result<(), Error> {
    for h in hierarchies() {
        for dir in [h.join(name), h.join(name).join("runtime")] {
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::Io(format!("mkdir {}", dir.display()), e))?;
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let parent = dir.parent().unwrap_or(&h).join(file);
                if let Ok(v) = std::fs::read_to_string(&parent) {
                    let _ = std::fs::write(dir.join(file), v.trim());
                }
            }
        }
    }
    Ok(())
}

/// Moves `pid` into the node's `runtime` cgroup of the tracking hierarchy (what it starts,
/// containerd's shims included, is then found and killed with the node).
pub(crate) fn adopt(cgroup: &str, pid: u32) -> Result<(), Error> {
    let procs = tracking().join(cgroup).join("runtime").join("cgroup.procs");
    std::fs::write(&procs, pid.to_string())
        .map_err(|e| Error::Io(format!("write {}", procs.display()), e))
}

/// Every process id in `cgroup` and below, in the tracking hierarchy.
pub(crate) fn processes(cgroup: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    walk(&tracking().join(cgroup), &mut |dir| {
        let text = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    });
    pids
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    if !dir.is_dir() {
        return;
    }
    f(dir);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), f);
            }
        }
    }
}

/// Undoes a node: kills every process left in its cgroup (containers and shims included),
/// unmounts what is mounted under its directory, removes its cgroups and kubelet's links to
/// its logs. Leaves its directory (the environment's, removed with it).
pub(crate) fn clean(cgroup: &str, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = processes(cgroup);
        if pids.is_empty() || Instant::now() > deadline {
            break;
        }
        for pid in pids {
            signal(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    unmount_under(dir);
    for h in hierarchies() {
        remove_cgroup_tree(&h.join(cgroup));
    }
    if let Ok(entries) = std::fs::read_dir("/var/log/containers") {
        for e in entries.flatten() {
            if std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(dir)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Removes a cgroup and its children, deepest first (a frozen cgroup is thawed first: its
/// killed processes cannot exit while frozen).
fn remove_cgroup_tree(dir: &Path) {
    if !dir.is_dir() {
        return;
    }
    let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
    let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Unmounts every mount point under `dir`, deepest first (kubelet's bind mount of its root,
/// a sandbox's shm, a container's overlay root).
pub(crate) fn unmount_under(dir: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut points: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(unescape_mount)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort();
    points.dedup();
    for p in points.iter().rev() {
        umount(p);
    }
}

/// A mount point as `/proc/self/mounts` writes it (space, tab, newline and backslash octal).
fn unescape_mount(field: &str) -> PathBuf {
    let mut out = String::new();
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(char::from(c));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    PathBuf::from(out)
}

fn umount(point: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(point.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: umount2(2) with a NUL-terminated path this function owns.
    #[allow(unsafe_code)]
    unsafe {
        if libc::umount2(c.as_ptr(), 0) != 0 {
            libc::umount2(c.as_ptr(), libc::MNT_DETACH);
        }
    }
}

/// Undoes the nodes of processes that no longer exist (a test binary killed mid-run): their
/// cgroups, and the mounts under their environments' directories.
fn clean_stale() -> Result<(), Error> {
    let mut stale = BTreeSet::new();
    for h in hierarchies() {
        for e in std::fs::read_dir(&h).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let dead = name
                .strip_prefix(CGROUP_PREFIX)
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !alive(pid));
            if dead {
                stale.insert(name);
            }
        }
    }
    for cgroup in &stale {
        let pid = cgroup[CGROUP_PREFIX.len()..]
            .split('-')
            .next()
            .unwrap_or("");
        for e in std::fs::read_dir(base()).into_iter().flatten().flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{pid}-"))
            {
                clean(cgroup, &e.path());
            }
        }
        clean(cgroup, Path::new("/nonexistent-kubesync-node"));
    }
    restore_sysctls();
    Ok(())
}

/// A thread that samples, every 20 ms, the TCP connections of the processes in a node's
/// cgroup (its containers, found through their sockets' inodes in their own network
/// namespace) and keeps every remote address it saw.
pub struct ConnectionWitness {
    seen: std::sync::Arc<Mutex<BTreeSet<std::net::SocketAddr>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ConnectionWitness {
    pub(crate) fn start(cgroup: String) -> ConnectionWitness {
        let seen = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                let now = remote_addresses(&processes(&format!("{cgroup}/kubepods")));
                s.lock().extend(now);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        ConnectionWitness {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// Every remote address seen so far.
    pub fn seen(&self) -> BTreeSet<std::net::SocketAddr> {
        self.seen.lock().clone()
    }

    /// The remote addresses seen so far that are not loopback addresses.
    pub fn not_loopback(&self) -> Vec<std::net::SocketAddr> {
        self.seen()
            .into_iter()
            .filter(|a| !a.ip().to_canonical().is_loopback())
            .collect()
    }
}

impl Drop for ConnectionWitness {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The remote addresses of the TCP sockets `pids` hold (connected or connecting).
fn remote_addresses(pids: &[u32]) -> BTreeSet<std::net::SocketAddr> {
    let mut out = BTreeSet::new();
    for pid in pids {
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let inodes: BTreeSet<String> = std::fs::read_dir(proc_dir.join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter_map(|l| {
                let l = l.to_string_lossy().into_owned();
                l.strip_prefix("socket:[")?
                    .strip_suffix(']')
                    .map(String::from)
            })
            .collect();
        if inodes.is_empty() {
            continue;
        }
        for table in ["tcp", "tcp6"] {
            let text = std::fs::read_to_string(proc_dir.join("net").join(table));
            for line in text.unwrap_or_default().lines().skip(1) {
                if let Some(addr) = tcp_remote(line, &inodes) {
                    out.insert(addr);
                }
            }
        }
    }
    out
}

/// The remote address of one line of `/proc/net/tcp{,6}`, if its socket is one of `inodes`
/// and it is not a listening socket.
pub(crate) fn tcp_remote(line: &str, inodes: &BTreeSet<String>) -> Option<std::net::SocketAddr> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 10 || !inodes.contains(f[9]) || f[3] == "0A" {
        return None;
    }
    let (ip, port) = f[2].split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip: std::net::IpAddr = match ip.len() {
        8 => std::net::Ipv4Addr::from(u32::from_str_radix(ip, 16).ok()?.swap_bytes()).into(),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, word) in bytes.chunks_mut(4).enumerate() {
                let w = u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16).ok()?;
                word.copy_from_slice(&w.swap_bytes().to_be_bytes());
            }
            std::net::Ipv6Addr::from(bytes).into()
        }
        _ => return None,
    };
    (!ip.is_unspecified()).then_some(std::net::SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_lines_give_their_remote_address() {
        let inodes: BTreeSet<String> = ["4242".to_string()].into();
        // 127.0.0.1:40000 -> 127.0.0.1:6443, established, inode 4242.
        let v4 = "  1: 0100007F:9C40 0100007F:192B 01 00000000:00000000 00:00000000 00000000 \
                  65532        0 4242 1 0000000000000000 20 4 30 10 -1";
        assert_eq!(
            tcp_remote(v4, &inodes),
            Some("127.0.0.1:6443".parse().expect("addr"))
        );
        // 10.0.0.1:443, another socket: not ours.
        let other = v4.replace(" 4242 ", " 4343 ");
        assert_eq!(tcp_remote(&other, &inodes), None);
        // A listening socket has no remote.
        let listening = v4.replace(" 01 ", " 0A ");
        assert_eq!(tcp_remote(&listening, &inodes), None);
        // ::ffff:10.0.0.1:443 from tcp6.
        let v6 = "  0: 00000000000000000000000000000000:1F90 0000000000000000FFFF00000100000A:01BB \
                  01 00000000:00000000 00:00000000 00000000 65532 0 4242 1";
        let addr = tcp_remote(v6, &inodes).expect("v6");
        assert_eq!(addr.port(), 443);
        assert_eq!(addr.ip().to_canonical().to_string(), "10.0.0.1");
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(
            unescape_mount("/tmp/a\\040b/c"),
            PathBuf::from("/tmp/a b/c")
        );
        assert_eq!(unescape_mount("/plain"), PathBuf::from("/plain"));
    }
}
