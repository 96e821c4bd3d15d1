//! The link's speed and the traffic classes' turns on it, set through the driver as mlx5e
//! sets them for `ethtool -s DEV speed S` (PTYS, then PAOS down and up) and `dcb ets set ...
//! tc-tsa ... tc-bw ...` (QETCR's groups, then its shares), against the model. What the model
//! does with them (the link paced at its speed, the classes sharing it) is tested where it is
//! built, `emu/tests/link_speed.rs`: a debug build of the model moves 9 KB frames through a
//! driver's port pair slower than 1 Gb/s, so a driver-level timing would show nothing.

use cxdirect::{ClassSelection, DriverError, PortConfig};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::reg;
use cxdirect_tests::setup::started_sides;

/// The speeds, PTYS as the driver reads it, a speed the port lacks refused with the ones it
/// offers named, and the classes' groups and shares as mlx5e computes them read back from
/// QETCR. Before, the port offered 100 Gb/s alone and the driver set neither.
#[test]
fn the_driver_sets_the_links_speed_and_the_classes_selection_as_linux_does() {
    let ((mut pa, _txa, _rxa), _b, _models) =
        started_sides(EmuConfig::default(), PortConfig::default());
    let dev = pa.device();
    let speeds = dev.link_speeds().expect("PTYS");
    assert_eq!(speeds.running_mbps, 100_000);
    assert_eq!(
        reg::eth_proto_speeds(speeds.offered).collect::<Vec<_>>(),
        vec![1_000, 10_000, 25_000, 40_000, 50_000, 100_000]
    );
    dev.set_link_speed(Some(1_000)).expect("1 Gb/s");
    let speeds = dev.link_speeds().expect("PTYS");
    assert_eq!(
        (speeds.running_mbps, speeds.allowed, speeds.autoneg_off),
        (1_000, reg::ETH_PROTO_1000BASE_KX, true)
    );
    match dev.set_link_speed(Some(56_000)) {
        Err(DriverError::Config(e)) => {
            assert_eq!((e.field, e.value), ("mbps", 56_000));
            assert!(
                e.allowed
                    .contains("1000, 10000, 25000, 40000, 50000, 100000"),
                "{}",
                e.allowed
            );
        }
        other => panic!("56 Gb/s is not offered: {other:?}"),
    }
    assert_eq!(
        dev.link_speeds().expect("PTYS").running_mbps,
        1_000,
        "unchanged"
    );
    dev.set_link_speed(None).expect("every speed");
    let speeds = dev.link_speeds().expect("PTYS");
    assert_eq!(
        (speeds.running_mbps, speeds.allowed, speeds.autoneg_off),
        (100_000, speeds.offered, false)
    );

    // `dcb ets set ... tc-tsa 0:ets 1:ets 2:strict ... tc-bw 0:70 1:30 ...`.
    use ClassSelection::{Ets, Strict};
    dev.set_class_selection(&[
        Ets(70),
        Ets(30),
        Strict,
        Strict,
        Strict,
        Strict,
        Strict,
        Strict,
    ])
    .expect("QETCR");
    let chosen: Vec<(u8, u8)> = dev
        .class_settings()
        .expect("QETCR read")
        .iter()
        .map(|c| (c.group, c.percent))
        .collect();
    assert_eq!(
        chosen,
        vec![
            (0, 70),
            (0, 30),
            (1, 100),
            (2, 100),
            (3, 100),
            (4, 100),
            (5, 100),
            (6, 100)
        ]
    );
    dev.set_priority_class(3, 5).expect("QTCT");
    dev.set_class_rate_limit(5, Some(2_000)).expect("QETCR");
    assert_eq!(dev.priority_classes().expect("QTCT reads")[3], 5);
    assert_eq!(
        dev.class_settings().expect("QETCR read")[5].limit_mbps,
        Some(2_000),
        "2 Gb/s: 20 units of 100 Mb/s"
    );
    for (bad, field) in [
        (
            vec![
                Ets(70),
                Ets(20),
                Strict,
                Strict,
                Strict,
                Strict,
                Strict,
                Strict,
            ],
            "ETS shares",
        ),
        (
            vec![
                Ets(101),
                Strict,
                Strict,
                Strict,
                Strict,
                Strict,
                Strict,
                Strict,
            ],
            "percent",
        ),
        (vec![Strict; 7], "classes"),
    ] {
        match dev.set_class_selection(&bad) {
            Err(DriverError::Config(e)) => assert_eq!(e.field, field),
            other => panic!("{bad:?} must be refused: {other:?}"),
        }
    }
}
