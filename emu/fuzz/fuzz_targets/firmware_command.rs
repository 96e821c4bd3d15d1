//! A hostile driver's commands: arbitrary command entries and mailbox bytes (raw mode), or
//! arbitrary command inputs delivered correctly to an initialized function (structured mode).
//! The model must answer every one with a status, never panic or hang.

#![no_main]

use cxdirect_emu::testkit::Host;
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::cmd::MAILBOX_BLOCK_SIZE;
use cxdirect_hw::init_seg;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let cfg = EmuConfig { init_delay: Some(std::time::Duration::ZERO), ..EmuConfig::default() };
    let mut host = Host::new(Device::loopback(cfg), 4 << 20);
    if mode & 1 == 0 {
        // Raw: the entry and up to 16 mailbox blocks straight from the input.
        host.start_cmdif();
        if mode & 2 != 0 {
            host.bring_up();
        }
        let blocks = host.alloc(16 * 1024, 1024);
        let (entry, mailboxes) = rest.split_at(rest.len().min(64));
        let mut e = [0u8; 64];
        e[..entry.len()].copy_from_slice(entry);
        e[63] |= 1;
        if mode & 4 != 0 {
            // Point the chains at the fuzzed blocks so delivery checks get past the pointers.
            e[8..16].copy_from_slice(&blocks.to_be_bytes());
            e[0x30..0x38].copy_from_slice(&(blocks + 8 * 1024).to_be_bytes());
        }
        for (i, chunk) in mailboxes.chunks(MAILBOX_BLOCK_SIZE).take(16).enumerate() {
            host.write(blocks + i as u64 * 1024, chunk);
        }
        host.write(host.cmdq, &e);
        host.mmio_w32(init_seg::CMD_DBELL as u64, 1);
    } else {
        // Structured: correctly delivered commands with fuzzed contents.
        host.bring_up();
        for cmd in rest.split(|&b| b == 0xa5).take(8) {
            if cmd.len() < 2 {
                continue;
            }
            let outlen = usize::from(cmd[0]) * 32 + 16;
            let _ = host.exec(&cmd[1..], outlen);
        }
    }
});
