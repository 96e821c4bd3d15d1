//! A hostile CM peer against `Cm::receive`: a client and a server CM, established once through
//! an in-memory wire, then fed MADs from the input (raw, or a recorded MAD with bytes spliced
//! in so the IDs and states are reached) to either side, interleaved with time passing and
//! the API calls a consumer makes.
//!
//! Invariants: no panic; the connection tables never exceed their limits; a poll never hands
//! out more than the pending-send bound plus one retransmission per connection; every MAD a
//! side sends parses as a CM message.

#![no_main]

use cxdirect::cm::{parse, Cm, Event, Identity, CmAddress, QpParams};
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;
use std::time::Duration;

const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PORT: u16 = 7174;
const MAX_CONNS: usize = 8;
const MAX_SENDS: usize = 16;

fn identity(guid: u64, ip: Ipv4Addr, seed: u64) -> Identity {
    let mut me = Identity::new(guid, ip, seed);
    me.limits.max_connections = MAX_CONNS;
    me.limits.max_pending_sends = MAX_SENDS;
    me
}

struct Sides {
    client: Cm,
    server: Cm,
    now: Duration,
    recorded: Vec<[u8; 256]>,
}

impl Sides {
    /// Polls both and delivers, a bounded number of rounds; checks every sent MAD.
    fn pump(&mut self) {
        for _ in 0..8 {
            let c = self.client.poll(self.now);
            let s = self.server.poll(self.now);
            assert!(c.sends.len() <= MAX_SENDS + MAX_CONNS);
            assert!(s.sends.len() <= MAX_SENDS + MAX_CONNS);
            for e in s.events.iter() {
                if let Event::ConnectRequest(r) = e {
                    let _ = self.server.accept(r.id, &QpParams::rping(0x22), &[]);
                }
            }
            if c.sends.is_empty() && s.sends.is_empty() {
                break;
            }
            for (_, mad) in c.sends {
                assert!(parse(&mad).is_ok(), "client sent an unparsable MAD");
                self.record(mad);
                if let Ok(Some(Event::ConnectRequest(r))) =
                    self.server.receive(self.now, CmAddress::ipv4(CLIENT), &mad)
                {
                    let _ = self.server.accept(r.id, &QpParams::rping(0x22), &[]);
                }
            }
            for (_, mad) in s.sends {
                assert!(parse(&mad).is_ok(), "server sent an unparsable MAD");
                self.record(mad);
                let _ = self.client.receive(self.now, CmAddress::ipv4(SERVER), &mad);
            }
        }
        assert!(self.client.connections() <= MAX_CONNS);
        assert!(self.server.connections() <= MAX_CONNS);
    }

    fn record(&mut self, mad: [u8; 256]) {
        if self.recorded.len() < 64 {
            self.recorded.push(mad);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut s = Sides {
        client: Cm::new(identity(1, CLIENT, 0x1234)),
        server: Cm::new(identity(2, SERVER, 0x9876)),
        now: Duration::ZERO,
        recorded: Vec::new(),
    };
    let _ = s.server.listen(PORT);
    let c = s
        .client
        .connect(SERVER, PORT, 40000, &QpParams::rping(0x11), &[])
        .ok();
    s.pump();

    let mut input = data;
    while let Some((&op, rest)) = input.split_first() {
        input = rest;
        match op % 8 {
            // A raw MAD to one side.
            0 | 1 => {
                let mut mad = [0u8; 256];
                let n = input.len().min(256);
                mad[..n].copy_from_slice(&input[..n]);
                input = &input[n..];
                let (side, from) = if op % 8 == 0 {
                    (&mut s.server, CmAddress::ipv4(CLIENT))
                } else {
                    (&mut s.client, CmAddress::ipv4(SERVER))
                };
                let _ = side.receive(s.now, from, &mad);
            }
            // A recorded MAD with a few bytes replaced, to either side.
            2 | 3 => {
                if s.recorded.is_empty() || input.len() < 2 {
                    continue;
                }
                let mut mad = s.recorded[usize::from(input[0]) % s.recorded.len()];
                let edits = usize::from(input[1] % 8);
                input = &input[2..];
                for _ in 0..edits {
                    if input.len() < 2 {
                        break;
                    }
                    mad[usize::from(input[0])] = input[1];
                    input = &input[2..];
                }
                let side = if op % 8 == 2 { &mut s.server } else { &mut s.client };
                let _ = side.receive(s.now, CmAddress::ipv4(Ipv4Addr::new(10, 0, 0, 66)), &mad);
            }
            // Time passes (up to about 70 s).
            4 => {
                let step = input.first().copied().unwrap_or(0);
                input = input.get(1..).unwrap_or(&[]);
                s.now += Duration::from_millis(u64::from(step) * 275);
            }
            // Consumer calls.
            5 => {
                if let Some(id) = c {
                    let _ = s.client.disconnect(id);
                }
            }
            6 => {
                let port = input.first().copied().unwrap_or(0);
                input = input.get(1..).unwrap_or(&[]);
                let _ = s.client.connect(
                    SERVER,
                    PORT + u16::from(port % 2),
                    u16::from(port),
                    &QpParams::rping(u32::from(port) + 0x100),
                    &[],
                );
            }
            _ => {}
        }
        s.pump();
    }
});
