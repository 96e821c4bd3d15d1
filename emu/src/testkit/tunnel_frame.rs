//! Tunnelled test frames: an outer Ethernet and IPv4 header around a tunnel header the caller
//! builds (UDP and VXLAN or GENEVE, or GRE) and the frame it carries.

/// `inner` inside `tunnel` (the UDP and VXLAN or GENEVE headers, or the GRE header): Ethernet
/// (00:01:01:01:01:01 from 02:5a:00:00:00:07), IPv4 1.1.1.1 to 2.2.2.2 of protocol `proto`
/// (17 for UDP tunnels, 47 for GRE; header checksum 0, which the model does not check), then
/// `tunnel` and `inner`.
pub fn tunnelled_frame(proto: u8, tunnel: &[u8], inner: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0x00, 0x01, 0x01, 0x01, 0x01, 0x01, 0x02, 0x5a, 0, 0, 0, 0x07, 0x08, 0x00,
    ];
    let total = (20 + tunnel.len() + inner.len()) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        proto,
    ]);
    f.extend_from_slice(&[0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
    f.extend_from_slice(tunnel);
    f.extend_from_slice(inner);
    f
}
