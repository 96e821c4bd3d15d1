//! smoltcp on cxdirect (feature `smoltcp`): two functions of the emulated pair, each running
//! smoltcp over a port's queues through `CxPhy`, resolve each other by ARP, answer ICMP echo
//! and exchange a TCP stream in both directions (the ordinary path next to devmem TCP).

use cxdirect::smoltcp_phy::smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use cxdirect::smoltcp_phy::smoltcp::phy::{ChecksumCapabilities, Device};
use cxdirect::smoltcp_phy::smoltcp::socket::{icmp, tcp};
use cxdirect::smoltcp_phy::smoltcp::time::Instant;
use cxdirect::smoltcp_phy::smoltcp::wire::{
    EthernetAddress, HardwareAddress, Icmpv4Packet, Icmpv4Repr, IpAddress, IpCidr, Ipv4Address,
};
use cxdirect::smoltcp_phy::CxPhy;
use cxdirect::Port;
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::EmuConfig;
use cxdirect_tests::setup::{small_port, started_sides};

const A_IP: Ipv4Address = Ipv4Address::new(192, 168, 77, 3);
const B_IP: Ipv4Address = Ipv4Address::new(192, 168, 77, 1);
const PORT: u16 = 5201;

struct Host {
    _port: Port<EmuBackend>,
    phy: CxPhy<EmuBackend>,
    iface: Interface,
    sockets: SocketSet<'static>,
}

impl Host {
    fn new(side: cxdirect_tests::setup::Side, ip: Ipv4Address) -> Self {
        let (mut port, mut tx, mut rx) = side;
        let mac = port.device().info().mac;
        let mut phy = CxPhy::new(rx.remove(0), tx.remove(0), port.pool().clone(), 1500);
        let config = Config::new(HardwareAddress::Ethernet(EthernetAddress(mac)));
        let mut iface = Interface::new(config, &mut phy, Instant::from_millis(0));
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(IpAddress::Ipv4(ip), 24)).unwrap();
        });
        Self {
            _port: port,
            phy,
            iface,
            sockets: SocketSet::new(Vec::new()),
        }
    }

    fn poll(&mut self, now: Instant) {
        self.iface.poll(now, &mut self.phy, &mut self.sockets);
    }

    fn tcp(&mut self) -> SocketHandle {
        let s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; 65536]),
            tcp::SocketBuffer::new(vec![0; 65536]),
        );
        self.sockets.add(s)
    }
}

fn pair() -> (Host, Host) {
    let (a, b, _) = started_sides(EmuConfig::default(), small_port());
    (Host::new(a, A_IP), Host::new(b, B_IP))
}

/// Polls both hosts with time moving 1 ms a round until `done` or 20,000 rounds.
fn run(a: &mut Host, b: &mut Host, mut done: impl FnMut(&mut Host, &mut Host) -> bool) -> bool {
    for t in 0..20_000 {
        let now = Instant::from_millis(t);
        a.poll(now);
        b.poll(now);
        if done(a, b) {
            return true;
        }
    }
    false
}

/// ncdevmem's `-v 7` pattern: byte i is (i % 7) + 1, with 7 written as '\n'.
fn pattern(i: usize) -> u8 {
    match (i % 7) as u8 + 1 {
        7 => b'\n',
        v => v,
    }
}

#[test]
fn arp_and_icmp_echo_between_two_smoltcp_hosts() {
    let (mut a, mut b) = pair();
    let h = a.sockets.add(icmp::Socket::new(
        icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY; 4], vec![0; 1024]),
        icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY; 4], vec![0; 1024]),
    ));
    a.sockets
        .get_mut::<icmp::Socket>(h)
        .bind(icmp::Endpoint::Ident(0x22))
        .unwrap();
    let data = *b"cxdirect smoltcp";
    let repr = Icmpv4Repr::EchoRequest {
        ident: 0x22,
        seq_no: 1,
        data: &data,
    };
    {
        let s = a.sockets.get_mut::<icmp::Socket>(h);
        let buf = s.send(repr.buffer_len(), IpAddress::Ipv4(B_IP)).unwrap();
        repr.emit(
            &mut Icmpv4Packet::new_unchecked(buf),
            &ChecksumCapabilities::default(),
        );
    }
    let mut reply = None;
    let got = run(&mut a, &mut b, |a, _| {
        let s = a.sockets.get_mut::<icmp::Socket>(h);
        if s.can_recv() {
            let (bytes, from) = s.recv().unwrap();
            let p = Icmpv4Packet::new_checked(bytes).unwrap();
            let r = Icmpv4Repr::parse(&p, &ChecksumCapabilities::default()).unwrap();
            if let Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } = r
            {
                reply = Some((ident, seq_no, data.to_vec(), from));
            }
            return true;
        }
        false
    });
    assert!(got, "no echo reply");
    assert_eq!(reply, Some((0x22, 1, data.to_vec(), IpAddress::Ipv4(B_IP))));
    // Both sides went through the driver's queues (ARP request and reply, echo and reply).
    assert!(a.phy.stats().tx_frames >= 2 && b.phy.stats().tx_frames >= 2);
    assert!(a.phy.stats().rx_frames >= 2 && b.phy.stats().rx_frames >= 2);
    assert_eq!(a.phy.stats().tx_nombuf, 0);
    let caps = a.phy.capabilities();
    assert_eq!(caps.max_transmission_unit, 1514);
}

#[test]
fn tcp_stream_both_ways_between_two_smoltcp_hosts() {
    const BYTES: usize = 1 << 20;
    let (mut a, mut b) = pair();
    let server = b.tcp();
    b.sockets
        .get_mut::<tcp::Socket>(server)
        .listen(PORT)
        .unwrap();
    let client = a.tcp();
    {
        let cx = a.iface.context();
        a.sockets
            .get_mut::<tcp::Socket>(client)
            .connect(cx, (IpAddress::Ipv4(B_IP), PORT), 49152)
            .unwrap();
    }
    let (mut sent, mut received, mut echoed, mut back) = (0usize, 0usize, 0usize, 0usize);
    let mut bad = 0usize;
    let done = run(&mut a, &mut b, |a, b| {
        // A sends the pattern; B checks it and sends it back; A checks what comes back.
        let c = a.sockets.get_mut::<tcp::Socket>(client);
        while c.can_send() && sent < BYTES {
            let n = c
                .send(|buf| {
                    let n = buf.len().min(BYTES - sent);
                    for (i, x) in buf[..n].iter_mut().enumerate() {
                        *x = pattern(sent + i);
                    }
                    (n, n)
                })
                .unwrap();
            if n == 0 {
                break;
            }
            sent += n;
        }
        let s = b.sockets.get_mut::<tcp::Socket>(server);
        while s.can_recv() && s.can_send() {
            let mut chunk = [0u8; 4096];
            let room = s.send_capacity() - s.send_queue();
            let n = s.recv_slice(&mut chunk[..room.min(4096)]).unwrap();
            if n == 0 {
                break;
            }
            bad += (0..n)
                .filter(|&i| chunk[i] != pattern(received + i))
                .count();
            received += n;
            echoed += s.send_slice(&chunk[..n]).unwrap();
        }
        let c = a.sockets.get_mut::<tcp::Socket>(client);
        while c.can_recv() {
            let mut chunk = [0u8; 4096];
            let n = c.recv_slice(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            bad += (0..n).filter(|&i| chunk[i] != pattern(back + i)).count();
            back += n;
        }
        back == BYTES
    });
    assert!(
        done,
        "stalled: sent {sent} received {received} echoed {echoed} back {back}"
    );
    assert_eq!((received, echoed, bad), (BYTES, BYTES, 0));
    // Close from the client; the server sees the end of the stream and closes too.
    a.sockets.get_mut::<tcp::Socket>(client).close();
    let closed = run(&mut a, &mut b, |a, b| {
        let s = b.sockets.get_mut::<tcp::Socket>(server);
        if !s.may_recv() && s.is_open() {
            s.close();
        }
        !a.sockets.get_mut::<tcp::Socket>(client).is_open() && !s.is_open()
    });
    assert!(closed, "connection did not close");
    assert_eq!(a.phy.stats().tx_nombuf + b.phy.stats().tx_nombuf, 0);
}
