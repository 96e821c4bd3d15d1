//! The `cxdirect-emu-server` program over its socket, driven by the `vfio_user` crate's client
//! as QEMU would drive it: region and IRQ info, config space, a memfd mapped as guest memory
//! page by page, BAR0 reads, a firmware command executed by DMA through that memfd, an MSI-X
//! eventfd, and the server exiting when the client disconnects. Also two functions in one
//! process, two processes cabled together, and a client that sends garbage.

use cxdirect_hw::cmd::{CmdLayout, Opcode, CMD_TYPE_PCIE};
use cxdirect_hw::init_seg;
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::memfd::{memfd_create, MFdFlags};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::Client;

const BAR0: u32 = 0;
const CONFIG: u32 = 7;
const MSIX: u32 = 2;
const IOVA: u64 = 0x8000_0000;

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "cxdirect-server-socket-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn spawn(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_cxdirect-emu-server"))
        .args(args.iter().map(|a| a.as_ref()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start cxdirect-emu-server")
}

fn wait_for_socket(path: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("server exited early with {status}: {}", stderr(child));
        }
        assert!(Instant::now() < deadline, "no socket at {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for the server to exit (at most 10 s; it is killed and the test fails otherwise).
fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server did not exit: {}", stderr(child));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    text
}

fn read32(client: &mut Client, region: u32, offset: u64) -> [u8; 4] {
    let mut buf = [0u8; 4];
    client.region_read(region, offset, &mut buf).unwrap();
    buf
}

fn bar_be32(client: &mut Client, offset: usize) -> u32 {
    u32::from_be_bytes(read32(client, BAR0, offset as u64))
}

fn bar_w32(client: &mut Client, offset: usize, value: u32) {
    client
        .region_write(BAR0, offset as u64, &value.to_be_bytes())
        .unwrap();
}

fn vendor_device(client: &mut Client) -> (u16, u16) {
    let id = u32::from_le_bytes(read32(client, CONFIG, 0));
    (id as u16, (id >> 16) as u16)
}

fn enable_memory_and_bus_master(client: &mut Client) {
    let command: u16 = (1 << 1) | (1 << 2);
    client
        .region_write(CONFIG, 4, &command.to_le_bytes())
        .unwrap();
}

#[test]
fn a_client_maps_memory_runs_a_command_and_disconnects() {
    let dir = temp_dir("one");
    let socket = dir.join("cx.sock");
    let pcap = dir.join("wire.pcap");
    let mut child = spawn(&[&"--socket", &socket, &"--pcap", &pcap]);
    wait_for_socket(&socket, &mut child);

    let mut client = Client::new(&socket).expect("connect and negotiate");
    // Regions: BAR0 trapped (no mmap), config space, the rest absent.
    let bar0 = client.region(BAR0).expect("BAR0");
    assert_eq!(bar0.size, 32 << 20);
    assert_eq!(
        bar0.flags,
        VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE
    );
    assert_eq!(bar0.flags & VFIO_REGION_INFO_FLAG_MMAP, 0);
    assert!(bar0.sparse_areas.is_empty());
    assert_eq!(client.region(CONFIG).expect("config").size, 4096);
    for absent in [1, 2, 3, 4, 5, 6, 8] {
        assert_eq!(client.region(absent).expect("listed").size, 0);
    }
    let msix = client.get_irq_info(MSIX).unwrap();
    assert_eq!(msix.count, 64);
    assert_ne!(msix.flags & VFIO_IRQ_INFO_EVENTFD, 0);
    assert_eq!(client.get_irq_info(0).unwrap().count, 0, "no INTx");
    assert_eq!(client.get_irq_info(1).unwrap().count, 0, "no MSI");

    assert_eq!(vendor_device(&mut client), (0x15b3, 0x101d));
    enable_memory_and_bus_master(&mut client);

    // Guest memory: a memfd, mapped one page at a time, out of file order.
    let mem = File::from(memfd_create("guest-ram", MFdFlags::MFD_CLOEXEC).unwrap());
    mem.set_len(4 * 4096).unwrap();
    client
        .dma_map(3 * 4096, IOVA, 4096, mem.as_raw_fd())
        .unwrap();
    client
        .dma_map(0, IOVA + 4096, 4096, mem.as_raw_fd())
        .unwrap();

    let rev = bar_be32(&mut client, init_seg::FW_REV);
    assert_eq!((rev & 0xffff, rev >> 16), (22, 39), "firmware 22.39");

    // ENABLE_HCA through a command queue in the first mapped page (file offset 3 * 4096).
    let deadline = Instant::now() + Duration::from_secs(5);
    while bar_be32(&mut client, init_seg::INITIALIZING) >> 31 != 0 {
        assert!(Instant::now() < deadline, "firmware never came up");
        std::thread::sleep(Duration::from_millis(1));
    }
    bar_w32(&mut client, init_seg::CMDQ_ADDR_H, (IOVA >> 32) as u32);
    bar_w32(&mut client, init_seg::CMDQ_ADDR_L_SZ, IOVA as u32);
    let mut input = [0u8; 16];
    input[0..2].copy_from_slice(&(Opcode::EnableHca as u16).to_be_bytes());
    let mut entry = CmdLayout::zeroed();
    entry
        .set_kind(CMD_TYPE_PCIE)
        .set_inlen(16)
        .set_outlen(16)
        .set_token(1)
        .set_status_own(1);
    entry.set_inline_input(&input);
    mem.write_all_at(entry.as_bytes(), 3 * 4096).unwrap();
    bar_w32(&mut client, init_seg::CMD_DBELL, 1);
    let mut back = [0u8; 64];
    mem.read_exact_at(&mut back, 3 * 4096).unwrap();
    let done = CmdLayout::new(&back[..]).unwrap();
    assert!(!done.owned_by_hw(), "the device completed the command");
    assert_eq!(done.delivery_status_raw(), 0);
    assert_eq!(done.inline_output()[0], 0, "ENABLE_HCA status OK");

    // An MSI-X eventfd, fired through the loopback trigger.
    let efd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK).unwrap();
    client
        .set_irqs(
            MSIX,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            5,
            1,
            &[efd.as_raw_fd()],
        )
        .unwrap();
    client
        .set_irqs(
            MSIX,
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            5,
            1,
            &[],
        )
        .unwrap();
    assert_eq!(efd.read().unwrap(), 1);

    client.dma_unmap(IOVA, 8192).unwrap();
    drop(client);

    let status = wait_exit(&mut child);
    let log = stderr(&mut child);
    eprintln!("server log:\n{log}");
    assert!(status.success(), "exit {status}: {log}");
    assert!(log.contains("client connected"), "{log}");
    assert!(log.contains("client disconnected"), "{log}");
    assert!(!socket.exists(), "socket removed at exit");
    let recorded = std::fs::read(&pcap).unwrap();
    assert_eq!(&recorded[..4], &0xa1b2_c3d4u32.to_le_bytes(), "a pcap file");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_sockets_serve_two_functions_until_both_clients_leave() {
    let dir = temp_dir("two");
    let (a, b) = (dir.join("a.sock"), dir.join("b.sock"));
    let mut child = spawn(&[&"--socket", &a, &"--socket", &b]);
    wait_for_socket(&a, &mut child);
    wait_for_socket(&b, &mut child);
    let mut ca = Client::new(&a).unwrap();
    let mut cb = Client::new(&b).unwrap();
    assert_eq!(vendor_device(&mut ca), (0x15b3, 0x101d));
    assert_eq!(vendor_device(&mut cb), (0x15b3, 0x101d));
    // Separate functions: enabling memory on one leaves the other's BAR reading all-ones.
    enable_memory_and_bus_master(&mut ca);
    assert_ne!(bar_be32(&mut ca, init_seg::FW_REV), u32::MAX);
    assert_eq!(bar_be32(&mut cb, init_seg::FW_REV), u32::MAX);
    drop(ca);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "still serving the second client"
    );
    assert_eq!(vendor_device(&mut cb), (0x15b3, 0x101d));
    drop(cb);
    let status = wait_exit(&mut child);
    let log = stderr(&mut child);
    assert!(status.success(), "exit {status}: {log}");
    assert!(log.contains("serving 2 function(s), back to back"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_processes_cable_their_functions_together() {
    let dir = temp_dir("pair");
    let (a, b) = (dir.join("a.sock"), dir.join("b.sock"));
    let pair_b = format!("pair:{}", b.display());
    let pair_a = format!("pair:{}", a.display());
    let mut pa = spawn(&[&"--socket", &a, &"--wire", &pair_b]);
    let mut pb = spawn(&[&"--socket", &b, &"--wire", &pair_a]);
    wait_for_socket(&a, &mut pa);
    wait_for_socket(&b, &mut pb);
    let mut ca = Client::new(&a).unwrap();
    let mut cb = Client::new(&b).unwrap();
    assert_eq!(vendor_device(&mut ca), (0x15b3, 0x101d));
    assert_eq!(vendor_device(&mut cb), (0x15b3, 0x101d));
    std::thread::sleep(Duration::from_millis(300));
    drop(ca);
    drop(cb);
    let (sa, sb) = (wait_exit(&mut pa), wait_exit(&mut pb));
    let (la, lb) = (stderr(&mut pa), stderr(&mut pb));
    assert!(sa.success() && sb.success(), "{la}\n{lb}");
    assert!(la.contains("the other server is connected"), "{la}");
    assert!(lb.contains("the other server is connected"), "{lb}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_sending_garbage_does_not_hang_the_server() {
    let dir = temp_dir("junk");
    let socket = dir.join("cx.sock");
    let mut child = spawn(&[&"--socket", &socket]);
    wait_for_socket(&socket, &mut child);
    let mut stream = UnixStream::connect(&socket).unwrap();
    // A Version request whose size is smaller than its own header, then noise.
    let mut junk = vec![0u8; 16];
    junk[2..4].copy_from_slice(&1u16.to_ne_bytes());
    junk[4..8].copy_from_slice(&4u32.to_ne_bytes());
    junk.extend((0..200u32).map(|i| (i * 37) as u8));
    let _ = stream.write_all(&junk);
    drop(stream);
    let status = wait_exit(&mut child);
    let log = stderr(&mut child);
    assert!(
        status.code() == Some(0) || status.code() == Some(1),
        "exit {status}: {log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_command_lines_exit_with_status_2() {
    let status = Command::new(env!("CARGO_BIN_EXE_cxdirect-emu-server"))
        .args(["--socket", "/tmp/x.sock", "--wire", "sideways"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
    let help = Command::new(env!("CARGO_BIN_EXE_cxdirect-emu-server"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("vfio-user-pci"));
}
