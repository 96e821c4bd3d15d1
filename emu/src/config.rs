//! How a modelled function is built: firmware version, timings, page demands, limits and the
//! execution mode. Every field has a default matching a ConnectX-6 Dx as the model presents it.

use std::time::Duration;

/// Where device work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// In the thread that wrote the doorbell (or delivered the frame): deterministic, for tests.
    Inline,
    /// On a device thread that polls for doorbells and frames: for throughput.
    Threaded,
}

/// Construction parameters of a modelled function.
#[derive(Debug, Clone)]
pub struct EmuConfig {
    /// Firmware version (major, minor, subminor) reported in the init segment.
    pub fw_version: (u16, u16, u16),
    /// How long `initializing` stays set after reset; `None` keeps it set forever (a firmware
    /// that never comes up).
    pub init_delay: Option<Duration>,
    /// Log2 of the number of command queue slots (0..=5).
    pub log_cmdq_size: u8,
    /// Pages the firmware asks for at boot (QUERY_PAGES op_mod 1).
    pub boot_pages: u32,
    /// Pages the firmware asks for before INIT_HCA (QUERY_PAGES op_mod 2).
    pub init_pages: u32,
    /// Pages asked for at a time, by PAGE_REQUEST, when context space runs low.
    pub page_request_chunk: u32,
    /// Size of BAR0 in bytes (power of two, at least 1 MiB).
    pub bar0_size: u64,
    /// Number of MSI-X vectors (1..=2048).
    pub msix_vectors: u16,
    /// Permanent MAC address of the port.
    pub mac: [u8; 6],
    /// Largest frame the port carries, in bytes without FCS (the PMTU maximum less 4).
    pub max_frame: usize,
    /// Where device work runs.
    pub exec: ExecMode,
    /// Milliseconds between health counter increments.
    pub health_tick: Duration,
    /// Threaded execution: how long the device thread keeps polling for doorbells and frames
    /// after its last piece of work before it sleeps until woken (a real device's engines
    /// never sleep). Zero sleeps at once, which costs a thread wake-up (microseconds, tens on a
    /// busy host) for a doorbell that finds it asleep but no CPU while idle; latency benchmarks
    /// poll. The two functions of a threaded [`crate::Device::pair`] share one device thread,
    /// which polls for the longer of their two windows.
    pub poll_window: Duration,
    /// Threaded execution of a [`crate::Device::pair`]: how many device threads serve its two
    /// functions, 1 or 2. 1 (default): one thread runs both functions' work, as one adapter's
    /// engines serve both its ports, so a frame crosses the wire without waking a second
    /// thread. 2: each function's work (its send doorbells, the frames arriving at its port,
    /// its RC timers) runs on a thread of its own, so one function's sending and the other's
    /// receiving proceed at once; the frames between them cross the wire's FIFO and the sender
    /// wakes the receiver's thread. A function's state is one lock, so a third thread would only
    /// wait for it: values above 2 serve as 2. The pair's larger value counts; a lone function
    /// ([`crate::Device::new`], [`crate::Device::loopback`]) always has one thread.
    pub device_threads: u8,
    /// Report and accept enhanced multi-packet send WQEs (opcode 0x29): several packets, each
    /// a data segment or an inline segment, behind one control and Ethernet segment. Off
    /// models a device without them (`enhanced_multi_pkt_send_wqe` = 0).
    pub multi_packet_send: bool,
    /// Report and accept LSO send WQEs (opcode 0x0e, TCP segmentation) of messages up to
    /// 256 KiB (`max_lso_cap` = 18). Off models a device without LSO (`max_lso_cap` = 0): an
    /// LSO WQE then ends in a local QP operation error.
    pub lso: bool,
    /// Report and accept striding (multi-packet) receive queues: one receive WQE is a buffer
    /// of 512..65,536 strides of 64..8,192 bytes, and each packet takes as many strides as it
    /// needs. Off models a device without them (`striding_rq` = 0).
    pub striding_rq: bool,
    /// Report RoCE (`roce` = 1, the RoCE capability page, and the XRC domains Linux's mlx5_ib
    /// needs on a RoCE port) and accept the RoCE address table commands, RoCE paths and RoCE v2
    /// packets. On by default, as on a ConnectX-6 Dx; off models a device without RoCE (RC QPs
    /// then take force-loopback paths only, and Linux's mlx5_ib binds as raw Ethernet).
    pub roce: bool,
    /// Report on-demand paging (general `pg` and the ODP capability page's RC, UD SEND, XRC and
    /// DC caps, with RoCE): a memory key loaded by UMR then takes its MTT entries' read and
    /// write bits as present bits, and an access through an entry without the bit it needs is
    /// a page fault, reported on the EQ subscribed to page faults and resumed by
    /// PAGE_FAULT_RESUME (`engine::rc::page_fault`, `engine::ud::page_fault`). On by default, as a ConnectX-6 Dx
    /// reports it; off, a device without `pg` (Linux's mlx5_ib then writes bare page
    /// addresses).
    pub odp: bool,
    /// Record every command the function executes, with its decoded input, status and
    /// syndrome (see [`crate::trace`]). `None` (default): no trace, and no cost beyond one
    /// branch per command. Functions given clones of one trace share it; each line names its
    /// function by MAC address.
    pub command_trace: Option<crate::trace::CommandTrace>,
    /// Offer software steering on NIC receive (rdma-core's `mlx5dv_dr`, steering entry format
    /// 1): software-owned ICM (SW ICM) for the entries, `general_obj_types` bit 8 (SW_ICM),
    /// the general page's `device_memory` and the device-memory page's three SW ICM ranges,
    /// SW_ICM general objects and memory keys of access mode SW_ICM (`objects::icm`,
    /// `fw::sw_icm`); the receive tables' `sw_owner_v2` and the drop and allow addresses
    /// (`sw_steering::terminals`), and software-owned receive tables whose frames walk the
    /// entries (`sw_steering::receive`). On by default, as on a ConnectX-6 Dx; off: none of it
    /// is reported, and all of it is refused.
    pub sw_steering: bool,
}

impl Default for EmuConfig {
    fn default() -> Self {
        Self {
            fw_version: (22, 39, 1002),
            init_delay: Some(Duration::from_millis(2)),
            log_cmdq_size: 5,
            boot_pages: 16,
            init_pages: 64,
            page_request_chunk: 16,
            bar0_size: 32 << 20,
            msix_vectors: 64,
            mac: [0x02, 0xcd, 0x00, 0x00, 0x00, 0x01],
            max_frame: 9978,
            exec: ExecMode::Inline,
            health_tick: Duration::from_millis(1),
            poll_window: Duration::ZERO,
            device_threads: 1,
            multi_packet_send: true,
            lso: true,
            striding_rq: true,
            roce: true,
            odp: true,
            command_trace: None,
            sw_steering: true,
        }
    }
}
