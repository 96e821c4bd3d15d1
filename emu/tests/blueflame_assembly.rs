//! BlueFlame copies that reach the vfio-user server eight bytes at a time (as QEMU forwards a
//! guest's stores) are put back together: the model takes the WQE from the copy, as a
//! ConnectX does behind a write-combining bus. What Linux checks with it is
//! `mlx5_core_test_wc` (drivers/net/ethernet/mellanox/mlx5/core/wc.c): 255 NOPs, each copied
//! with the CQE request set in the copy alone, and only the last one asking for a CQE in the
//! ring; a first CQE for any NOP but the last means write combining works, and libmlx5 then
//! gets BlueFlame UARs.

use cxdirect_emu::device::MmioError;
use cxdirect_emu::server::bar::{MmioTarget, FIRST_UAR_OFFSET};
use cxdirect_emu::server::blueflame::Assembly;
use cxdirect_emu::testkit::Host;
use cxdirect_emu::{Device, EmuConfig, ExecMode};
use cxdirect_hw::cqe::Cqe64;
use cxdirect_hw::doorbell::UAR_BF_OFFSET;
use cxdirect_hw::wqe::{opcode, CtrlSeg};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `TEST_WC_NUM_WQES` in Linux's wc.c.
const TEST_WC_NUM_WQES: u16 = 255;

/// A hold no test run waits out by accident.
const LONG_HOLD: Duration = Duration::from_secs(5);

/// Records the model writes the assembly makes.
#[derive(Default)]
struct Recorder {
    writes: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl Recorder {
    fn take(&self) -> Vec<(u64, Vec<u8>)> {
        std::mem::take(&mut *self.writes.lock().unwrap())
    }
}

impl MmioTarget for Recorder {
    fn bar_size(&self) -> u64 {
        32 << 20
    }

    fn mmio_read(&self, _offset: u64, buf: &mut [u8]) -> Result<(), MmioError> {
        buf.fill(0);
        Ok(())
    }

    fn mmio_write(&self, offset: u64, data: &[u8]) -> Result<(), MmioError> {
        self.writes.lock().unwrap().push((offset, data.to_vec()));
        Ok(())
    }
}

/// The first BlueFlame half of the first UAR page.
const BF: u64 = FIRST_UAR_OFFSET + UAR_BF_OFFSET as u64;

/// A control segment's first eight bytes announcing a WQE of `ds` 16-byte units.
fn first_store(ds: u8) -> [u8; 8] {
    [0, 0, 0, 0, 0, 0, 0x12, ds]
}

/// A 64-byte copy of a one-unit WQE, its bytes numbered.
fn copy64() -> Vec<u8> {
    let mut copy: Vec<u8> = (0..64u8).collect();
    copy[..8].copy_from_slice(&first_store(1));
    copy
}

fn store_by_store<T: MmioTarget + Send + Sync>(a: &Assembly<T>, at: u64, bytes: &[u8]) {
    for (i, store) in bytes.chunks(8).enumerate() {
        a.write(at + 8 * i as u64, store).expect("store");
    }
}

#[test]
fn a_copy_in_eight_stores_reaches_the_model_as_one_write() {
    let a = Assembly::new(Recorder::default(), LONG_HOLD);
    let copy = copy64();
    store_by_store(&a, BF, &copy);
    assert_eq!(a.target().take(), vec![(BF, copy.clone())]);
    // The second half, a 128-byte WQE (DS 8): two chunks, one write.
    let mut long: Vec<u8> = (0..128u8).collect();
    long[..8].copy_from_slice(&first_store(8));
    store_by_store(&a, BF + 256, &long);
    assert_eq!(a.target().take(), vec![(BF + 256, long)]);
    let stats = a.stats();
    assert_eq!(
        (stats.assembled, stats.interrupted, stats.expired),
        (2, 0, 0)
    );
}

#[test]
fn a_copy_that_comes_apart_rings_as_a_doorbell_before_what_came_next() {
    let a = Assembly::new(Recorder::default(), LONG_HOLD);
    let copy = copy64();
    // Two stores of the copy, then a CQ doorbell: the two go first, as they came.
    store_by_store(&a, BF, &copy[..16]);
    assert!(a.target().take().is_empty(), "held");
    a.write(FIRST_UAR_OFFSET + 0x20, &[0; 8]).unwrap();
    assert_eq!(
        a.target().take(),
        vec![
            (BF, copy[..8].to_vec()),
            (BF + 8, copy[8..16].to_vec()),
            (FIRST_UAR_OFFSET + 0x20, vec![0; 8])
        ]
    );
    // A doorbell at the same half (mlx5e rings one offset every time): the first rings when
    // the second comes.
    a.write(BF, &first_store(2)).unwrap();
    a.write(BF, &first_store(3)).unwrap();
    assert_eq!(a.target().take(), vec![(BF, first_store(2).to_vec())]);
    // Any other message (a read, a DMA map) rings it.
    a.interrupt();
    assert_eq!(a.target().take(), vec![(BF, first_store(3).to_vec())]);
    // A store that skips ahead is no continuation.
    a.write(BF + 256, &first_store(1)).unwrap();
    a.write(BF + 256 + 16, &[7; 8]).unwrap();
    assert_eq!(
        a.target().take(),
        vec![
            (BF + 256, first_store(1).to_vec()),
            (BF + 256 + 16, vec![7; 8])
        ]
    );
    assert_eq!(a.stats().interrupted, 4);
    assert_eq!(a.stats().assembled, 0);
}

#[test]
fn a_doorbell_nothing_follows_rings_when_the_hold_time_passes() {
    let a = Assembly::new(Recorder::default(), Duration::from_millis(1));
    a.write(BF, &first_store(1)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while seen.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        seen = a.target().take();
    }
    assert_eq!(seen, vec![(BF, first_store(1).to_vec())]);
    assert_eq!((a.stats().expired, a.stats().interrupted), (1, 0));
}

#[test]
fn stores_that_open_no_copy_pass_at_once() {
    let a = Assembly::new(Recorder::default(), LONG_HOLD);
    // DS 0, and a WQE longer than half a register (DS 17: 272 bytes): not BlueFlame copies.
    a.write(BF, &first_store(0)).unwrap();
    a.write(BF, &first_store(17)).unwrap();
    // Inside a half, in the UAR page's doorbell area, 4 bytes wide.
    a.write(BF + 8, &[1; 8]).unwrap();
    a.write(FIRST_UAR_OFFSET + 0x20, &[2; 8]).unwrap();
    a.write(BF, &[3; 4]).unwrap();
    assert_eq!(a.target().take().len(), 5);
    // With no hold, nothing is assembled.
    let off = Assembly::new(Recorder::default(), Duration::ZERO);
    store_by_store(&off, BF, &copy64());
    assert_eq!(off.target().take().len(), 8);
    assert_eq!(off.stats(), Default::default());
}

/// Linux's write-combining test on the model, its copies written eight bytes at a time; the
/// wqe_counter of the first CQE (`mlx5_wc_poll_cq`).
fn linux_wc_test(hold: Duration) -> u16 {
    let cfg = EmuConfig {
        exec: ExecMode::Inline,
        ..EmuConfig::default()
    };
    let mut h = Host::new(Device::loopback(cfg), 4 << 20);
    h.bring_up();
    let mut cq = h.create_cq(8);
    let tis = h.create_tis();
    let mut sq = h.create_sq(cq.cqn, tis, 8);
    let a = Assembly::new(h.dev.clone(), hold);
    let mut half = 0u64;
    for pc in 0..TEST_WC_NUM_WQES {
        let signaled = pc == TEST_WC_NUM_WQES - 1;
        let mut wqe = [0u8; 64];
        CtrlSeg::new(&mut wqe[..16])
            .expect("layout")
            .set_opcode(opcode::NOP)
            .set_wqe_index(pc)
            .set_qpn_or_sqn(sq.sqn)
            .set_ds(1)
            .set_ce(if signaled { 2 } else { 0 });
        h.write_wqe(&mut sq, &wqe);
        // The copy asks for a CQE whatever the ring's WQE says.
        let mut copy = wqe;
        CtrlSeg::new(&mut copy[..16]).expect("layout").set_ce(2);
        h.write_be32(sq.dbr + 4, u32::from(sq.pi));
        store_by_store(&a, h.uar_base() + UAR_BF_OFFSET as u64 + half, &copy);
        half ^= 256;
    }
    drop(a);
    let cqe = h.poll_cq(&mut cq).expect("a CQE for the NOPs");
    let cqe = Cqe64::new(&cqe[..]).expect("layout");
    assert_eq!(cqe.opcode(), 0, "a requester CQE");
    cqe.wqe_counter()
}

#[test]
fn linux_finds_write_combining_through_assembled_copies() {
    // Every copy came whole: the first NOP's copy asked for the first CQE.
    assert_eq!(linux_wc_test(LONG_HOLD), 0);
}

#[test]
fn without_assembly_linux_finds_no_write_combining() {
    // Each copy rang on its first store: the device fetched every NOP, and only the last
    // asked for a CQE (`MLX5_WC_STATE_UNSUPPORTED`).
    assert_eq!(linux_wc_test(Duration::ZERO), TEST_WC_NUM_WQES - 1);
}
