//! The function's registers, reset, execution modes and device-side faults.

use cxdirect_emu::counters::QueueKind;
use cxdirect_emu::pci;
use cxdirect_emu::testkit::{udp_frame, Host};
use cxdirect_emu::{Device, EmuConfig, ExecMode};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cqe::{CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::doorbell::UAR_BF_OFFSET;
use cxdirect_hw::eqe::{cq_error, EventType};
use cxdirect_hw::init_seg;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_PA};
use std::time::{Duration, Instant};

const MEM: usize = 16 << 20;

#[test]
fn init_segment_reads_like_the_manual() {
    // Long enough that a loaded machine still reads the register before the delay ends.
    let delay = Duration::from_millis(500);
    let cfg = EmuConfig {
        init_delay: Some(delay),
        ..EmuConfig::default()
    };
    let created = Instant::now();
    let h = Host::new(Device::new(cfg), MEM);
    let initializing = h.mmio_r32(init_seg::INITIALIZING as u64) >> 31;
    // A read that returned before the delay ended must have found the function initializing
    // (the timer starts after `created`); a machine too loaded to get there that soon cannot
    // tell.
    if created.elapsed() < delay {
        assert_eq!(initializing, 1, "initializing right after reset");
    }
    let rev = h.mmio_r32(init_seg::FW_REV as u64);
    assert_eq!((rev & 0xffff, rev >> 16), (22, 39));
    assert_eq!(h.mmio_r32(init_seg::CMDIF_REV_FW_SUB as u64) >> 16, 5);
    let geometry = h.mmio_r32(init_seg::CMDQ_ADDR_L_SZ as u64);
    assert_eq!((geometry >> 4) & 0xf, 5, "32 command slots");
    assert_eq!(geometry & 0xf, 6, "64-byte entries");
    // Ready once the delay has passed (polled: how soon after depends on the machine's load).
    let deadline = created + delay + Duration::from_secs(10);
    while h.mmio_r32(init_seg::INITIALIZING as u64) >> 31 != 0 {
        assert!(
            Instant::now() < deadline,
            "still initializing 10 s after the delay"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(created.elapsed() >= delay, "ready before the delay passed");
    let first = h.mmio_r32(init_seg::HEALTH_COUNTER as u64);
    std::thread::sleep(Duration::from_millis(5));
    assert_ne!(
        h.mmio_r32(init_seg::HEALTH_COUNTER as u64),
        first,
        "the health counter advances while healthy"
    );
    assert_eq!(
        h.mmio_r32(init_seg::HEALTH_SYND as u64 & !3) >> 16 & 0xff,
        0
    );
    h.dev.stall_health_counter();
    let stalled = h.mmio_r32(init_seg::HEALTH_COUNTER as u64);
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(h.mmio_r32(init_seg::HEALTH_COUNTER as u64), stalled);
}

#[test]
fn a_firmware_that_never_comes_up_stays_initializing() {
    let cfg = EmuConfig {
        init_delay: None,
        ..EmuConfig::default()
    };
    let h = Host::new(Device::new(cfg), MEM);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(h.mmio_r32(init_seg::INITIALIZING as u64) >> 31, 1);
}

#[test]
fn fatal_syndromes_show_in_the_health_buffer() {
    let mut h = Host::new(Device::new(EmuConfig::default()), MEM);
    h.bring_up();
    h.dev.inject_fatal(init_seg::health_syndrome::HW_FATAL_ERR);
    let dword = h.mmio_r32((init_seg::HEALTH_BUFFER + 0x3c) as u64);
    assert_eq!(
        (dword >> 16) & 0xff,
        u32::from(init_seg::health_syndrome::HW_FATAL_ERR)
    );
}

#[test]
fn pages_a_function_reset_takes_from_the_firmware_stay_counted_as_leaked() {
    let mut h = Host::new(Device::new(EmuConfig::default()), MEM);
    h.bring_up();
    let held = h.dev.firmware_pages_held();
    assert!(held > 0);
    h.dev.reset();
    assert_eq!(h.dev.firmware_pages_held(), 0);
    assert_eq!(h.dev.firmware_pages_leaked(), held as u64);
}

/// `nic_interface` as Linux's `mlx5_get_nic_state` reads it.
fn nic_state(h: &Host) -> u8 {
    (h.mmio_r32(init_seg::CMDQ_ADDR_L_SZ as u64) >> 8) as u8 & 7
}

#[test]
fn linux_s_recovery_flow_resets_the_firmware_through_nic_interface() {
    let mut h = Host::new(Device::new(EmuConfig::default()), MEM);
    h.bring_up();
    assert_eq!(nic_state(&h), init_seg::nic_interface::FULL_DRIVER);
    h.dev
        .inject_fatal_reset_required(init_seg::health_syndrome::FW_INTERNAL_ERR);
    // mlx5_health_check_fatal_sensors: the syndrome with the recovery flow required
    // (sensor_fw_synd_rfr), the interface still in full driver mode.
    let synd = h.mmio_r32((init_seg::HEALTH_BUFFER + 0x3c) as u64) >> 16 & 0xff;
    assert_eq!(synd, u32::from(init_seg::health_syndrome::FW_INTERNAL_ERR));
    let rfr = h.mmio_r32((init_seg::HEALTH_BUFFER + 0x38) as u64) >> 31;
    assert_eq!(rfr, 1, "rfr_severity's rfr bit");
    assert_eq!(nic_state(&h), init_seg::nic_interface::FULL_DRIVER);
    // reset_fw_if_needed: the firmware says it can reset, and Linux sets SW_RESET
    // (mlx5_set_nic_state keeps the address bits it read).
    let initializing = h.mmio_r32(init_seg::INITIALIZING as u64);
    assert_eq!(initializing >> 30 & 1, 1, "MLX5_FW_RESET_SUPPORTED_OFFSET");
    let word = h.mmio_r32(init_seg::CMDQ_ADDR_L_SZ as u64);
    h.mmio_w32(
        init_seg::CMDQ_ADDR_L_SZ as u64,
        (word & 0xffff_f000) | u32::from(init_seg::nic_interface::SW_RESET) << 8,
    );
    // mlx5_error_sw_reset waits for DISABLED; the health buffer is clear again.
    assert_eq!(nic_state(&h), init_seg::nic_interface::DISABLED);
    assert_eq!(h.mmio_r32((init_seg::HEALTH_BUFFER + 0x3c) as u64), 0);
    assert_eq!(h.mmio_r32((init_seg::HEALTH_BUFFER + 0x38) as u64), 0);
    assert_eq!(h.dev.health_syndrome(), 0);
    let counter = h.mmio_r32(init_seg::HEALTH_COUNTER as u64);
    std::thread::sleep(Duration::from_millis(5));
    assert_ne!(
        h.mmio_r32(init_seg::HEALTH_COUNTER as u64),
        counter,
        "the health counter runs again (mlx5_pci_slot_reset's wait_vital)"
    );
    // The reset dropped the firmware's pages without counting them as leaked, and left the
    // PCI function alone: mlx5_load_one brings the function up again from ENABLE_HCA.
    assert_eq!(h.dev.firmware_pages_leaked(), 0);
    h.bring_up();
    assert_eq!(nic_state(&h), init_seg::nic_interface::FULL_DRIVER);
    assert!(h.simple(Opcode::Nop, 0).is_ok());
}

#[test]
fn memory_decoding_and_bus_mastering_are_honoured() {
    let dev = Device::new(EmuConfig::default());
    let mut b = [0u8; 4];
    dev.mmio_read(0, &mut b).unwrap();
    assert_eq!(
        b, [0xff; 4],
        "reads float high while memory decoding is off"
    );
    let mut h = Host::new(dev, MEM);
    h.bring_up();
    // Bus mastering off: the command interface can no longer reach its queue.
    h.dev
        .config_write(pci::REG_COMMAND, &pci::COMMAND_MEMORY_SPACE.to_le_bytes())
        .unwrap();
    assert_eq!(
        h.simple(Opcode::Nop, 0),
        Err(cxdirect_emu::testkit::CmdFail::NoCompletion)
    );
    assert!(h.dev.counters().dma_faults > 0);
}

#[test]
fn function_level_reset_drops_everything() {
    let mut h = Host::new(Device::new(EmuConfig::default()), MEM);
    h.bring_up();
    h.create_cq(4);
    assert!(h.dev.firmware_pages_held() > 0);
    let devctl = pci::PCIE_CAP_OFFSET + pci::PCIE_DEVCTL;
    h.dev
        .config_write(devctl, &pci::PCIE_DEVCTL_INITIATE_FLR.to_le_bytes())
        .unwrap();
    assert_eq!(h.dev.firmware_pages_held(), 0);
    assert_eq!(h.dev.object_counts(), [0; 6]);
    let mut cmd = [0u8; 2];
    h.dev.config_read(pci::REG_COMMAND, &mut cmd).unwrap();
    assert_eq!(
        u16::from_le_bytes(cmd) & pci::COMMAND_BUS_MASTER,
        0,
        "reset clears bus mastering"
    );
    assert_eq!(h.mmio_r32(0), 0xffff_ffff, "and memory decoding");
}

#[test]
fn blueflame_as_eight_8_byte_writes_still_sends() {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let key = h.create_mkey(false, true);
    let mut cq = h.create_cq(4);
    let tisn = h.create_tis();
    let mut sq = h.create_sq(cq.cqn, tisn, 4);
    let frame = udp_frame(100, 7);
    let payload = h.alloc(frame.len() as u64, 64);
    let wqe = h.build_send(&sq, &frame, payload, key, true);
    // Write the ring and the record as `post` does, then the doorbell in eight 8-byte stores.
    h.write(sq.buf, &wqe[..64]);
    sq.pi = 1;
    h.write_be32(sq.dbr + 4, 1);
    let reg = h.uar_base() + UAR_BF_OFFSET as u64;
    for chunk in 0..8 {
        h.dev
            .mmio_write(
                reg + chunk * 8,
                &wqe[chunk as usize * 8..chunk as usize * 8 + 8],
            )
            .unwrap();
    }
    let cqe = h.poll_cq(&mut cq).expect("completion");
    assert_eq!(cqe[63] >> 4, CqeOpcode::Req as u8);
    assert_eq!(h.dev.counters().tx_frames, 1, "sent exactly once");
    assert_eq!(
        h.dev
            .queue_counters(QueueKind::Sq, sq.sqn)
            .unwrap()
            .doorbells,
        1
    );
}

#[test]
fn dma_to_an_unmapped_iova_is_an_error_completion_not_a_crash() {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    // A physical-address key that covers an IOVA range with nothing mapped behind it.
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    CreateMkeyIn::new(&mut input[..])
        .unwrap()
        .memory_key_mkey_entry_mut()
        .set_access_mode(MKC_ACCESS_MODE_PA)
        .set_lr(true)
        .set_lw(true)
        .set_pd(h.pd)
        .set_qpn(0xff_ffff)
        .set_start_addr(0x7000_0000_0000)
        .set_len(1 << 20);
    let out = h.exec(&input, 16).unwrap();
    let key = mkey_from_index(CreateMkeyOut::new(&out[..]).unwrap().mkey_index(), 0);
    let mut cq = h.create_cq(4);
    let tisn = h.create_tis();
    let mut sq = h.create_sq(cq.cqn, tisn, 4);
    let frame = udp_frame(100, 1);
    let payload = h.alloc(frame.len() as u64, 64);
    let mut wqe = h.build_send(&sq, &frame, payload, key, true);
    // Point the data segment (after control, Ethernet and one inline unit) into the hole.
    wqe[56..64].copy_from_slice(&0x7000_0000_0000u64.to_be_bytes());
    let faults = h.dev.counters().dma_faults;
    h.post(&mut sq, &wqe, false);
    let cqe = h.poll_cq(&mut cq).expect("error completion");
    let err = ErrCqe::new(&cqe[..]).unwrap();
    assert_eq!(err.opcode(), CqeOpcode::ReqErr as u8);
    assert_eq!(err.syndrome(), CqeSyndrome::LocalProtection as u8);
    assert!(
        h.dev.counters().dma_faults > faults,
        "the refused access was counted"
    );
}

#[test]
fn a_full_cq_raises_a_cq_error_event() {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let key = h.create_mkey(false, true);
    let mut cq = h.create_cq(2); // four entries, never consumed
    let tisn = h.create_tis();
    let mut sq = h.create_sq(cq.cqn, tisn, 4);
    let frame = udp_frame(60, 1);
    let payload = h.alloc(frame.len() as u64, 64);
    h.drain_eq();
    for _ in 0..5 {
        let wqe = h.build_send(&sq, &frame, payload, key, true);
        h.post(&mut sq, &wqe, true);
    }
    let errors: Vec<_> = h
        .drain_eq()
        .into_iter()
        .filter(|(t, _, _)| *t == EventType::CqError as u8)
        .collect();
    assert_eq!(errors.len(), 1);
    let data = &errors[0].2;
    assert_eq!(
        u32::from_be_bytes([data[0], data[1], data[2], data[3]]) & 0xff_ffff,
        cq.cqn
    );
    assert_eq!(data[11], cq_error::OVERRUN);
    assert_eq!(h.dev.counters().cq_overruns, 1);
    let mut seen = 0;
    while h.poll_cq(&mut cq).is_some() {
        seen += 1;
    }
    assert_eq!(seen, 4, "the CQEs written before the overrun are intact");
}

/// DPDK's mlx5 PMD keeps its send CQs' consumer counter in 16 bits (`uint16_t cq_ci`) and
/// writes it whole to the 24-bit field of the doorbell record: after 65,536 completions it
/// reads 0 again. The model compared all 24 bits and took the CQ for overrun at its 65,536th
/// completion, stopping the SQ with the rest of its WQEs unsent (found in the rig: testpmd's
/// last ring of packets never left). It compares the counters modulo twice the CQ's size.
#[test]
fn a_consumer_counter_kept_in_16_bits_does_not_overrun_the_cq() {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let key = h.create_mkey(false, true);
    let mut cq = h.create_cq(5);
    let tisn = h.create_tis();
    let mut sq = h.create_sq(cq.cqn, tisn, 6);
    let frame = udp_frame(60, 1);
    let payload = h.alloc(frame.len() as u64, 64);
    let completions = 65_536 + 40;
    for n in 1..=completions {
        let wqe = h.build_send(&sq, &frame, payload, key, true);
        h.post(&mut sq, &wqe, false);
        let cqe = h.poll_cq(&mut cq).expect("a completion for every send");
        assert_eq!(cqe[63] >> 4, CqeOpcode::Req as u8, "completion {n}");
        // What DPDK writes: the counter's low 16 bits.
        h.write_be32(cq.dbr, cq.ci & 0xffff);
    }
    assert_eq!(h.dev.counters().cq_overruns, 0);
    assert_eq!(h.dev.counters().tx_frames, completions as u64);
}

#[test]
fn the_pair_s_device_thread_keeps_serving_one_function_after_the_other_is_gone() {
    let cfg = EmuConfig {
        exec: ExecMode::Threaded,
        poll_window: Duration::from_millis(1),
        ..EmuConfig::default()
    };
    let (a, b) = Device::pair(cfg.clone(), cfg);
    drop(a);
    let mut hb = Host::new(b.clone(), MEM);
    hb.bring_up();
    let key = hb.create_mkey(false, true);
    let mut cq = hb.create_cq(6);
    let tisn = hb.create_tis();
    let mut sq = hb.create_sq(cq.cqn, tisn, 6);
    let count = 40;
    for i in 0..count {
        let frame = udp_frame(100, i as u8);
        let payload = hb.alloc(frame.len() as u64, 64);
        let wqe = hb.build_send(&sq, &frame, payload, key, true);
        hb.post(&mut sq, &wqe, i % 2 == 0);
        // Let the thread go to sleep now and then, so doorbells also have to wake it.
        if i % 10 == 9 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let mut completed = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while completed < count && Instant::now() < deadline {
        while let Some(cqe) = hb.poll_cq(&mut cq) {
            assert_eq!(cqe[63] >> 4, CqeOpcode::Req as u8);
            completed += 1;
        }
        std::thread::yield_now();
    }
    assert_eq!(
        completed, count,
        "every send completed on the shared thread"
    );
    assert_eq!(b.counters().tx_frames, count as u64);
}

#[test]
fn a_send_doorbell_on_a_uar_page_never_allocated_is_refused() {
    for exec in [ExecMode::Inline, ExecMode::Threaded] {
        let dev = Device::loopback(EmuConfig {
            exec,
            ..EmuConfig::default()
        });
        let mut h = Host::new(dev.clone(), MEM);
        h.bring_up();
        // The last UAR page: BAR0's last MiB is device memory (MEMIC), not UAR pages.
        let last_page = (dev.bar0_size() - (1 << 20)) / 4096 - 1;
        let wqe = [0x5au8; 64];
        dev.mmio_write(last_page * 4096 + UAR_BF_OFFSET as u64, &wqe)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while dev.counters().bad_doorbells == 0 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let counters = dev.counters();
        assert_eq!(
            (
                counters.bad_doorbells,
                counters.doorbells,
                counters.tx_frames
            ),
            (1, 0, 0),
            "{exec:?}"
        );
    }
}

#[test]
fn threaded_execution_moves_frames_between_a_pair() {
    let cfg = EmuConfig {
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    let (a, b) = Device::pair(cfg.clone(), cfg);
    let mut ha = Host::new(a, MEM);
    let mut hb = Host::new(b, MEM);
    ha.bring_up();
    hb.bring_up();
    let tx_key = ha.create_mkey(false, true);
    let rx_key = hb.create_mkey(false, true);
    let mut tx_cq = ha.create_cq(8);
    let tisn = ha.create_tis();
    let mut sq = ha.create_sq(tx_cq.cqn, tisn, 8);
    let mut rx_cq = hb.create_cq(8);
    let mut rq = hb.create_rq(rx_cq.cqn, 8, None);
    hb.steer_all_to(rq.rqn);
    let count = 200usize;
    let bufs: Vec<u64> = (0..count).map(|_| hb.alloc(2048, 64)).collect();
    for &buf in &bufs {
        hb.post_recv(&mut rq, buf, 2048, rx_key);
    }
    let frames: Vec<Vec<u8>> = (0..count)
        .map(|i| udp_frame(60 + i % 900, i as u8))
        .collect();
    let mut sent = 0;
    let mut received = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while received < count && Instant::now() < deadline {
        if sent < count && sq.pi.wrapping_sub(tx_cq.ci as u16) < 128 {
            let payload = ha.alloc(frames[sent].len() as u64, 64);
            let wqe = ha.build_send(&sq, &frames[sent], payload, tx_key, true);
            ha.post(&mut sq, &wqe, sent % 2 == 0);
            sent += 1;
        }
        while ha.poll_cq(&mut tx_cq).is_some() {}
        while let Some(cqe) = hb.poll_cq(&mut rx_cq) {
            assert_eq!(cqe[63] >> 4, CqeOpcode::RespSend as u8);
            assert_eq!(
                hb.read(bufs[received], frames[received].len()),
                frames[received]
            );
            received += 1;
        }
        std::thread::yield_now();
    }
    assert_eq!(
        received, count,
        "every frame arrived, in order, through the device threads"
    );
}
