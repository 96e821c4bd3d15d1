//! The protocol over the software fabric: whole runs, validation catching a corrupted WRITE,
//! and a server that refuses what krping never sends.

use super::fake::{pair, FakeQp};
use super::*;

const PATIENCE: Duration = Duration::from_millis(200);

fn options(count: u64, size: u32) -> Options {
    Options {
        size,
        count,
        validate: true,
        verbose: false,
    }
}

fn run(
    options: Options,
    tweak: impl FnOnce(&mut super::fake::Fabric),
) -> (Result<(), KrpingError>, Client, Server, String, FakeQp) {
    let (mut cqp, mut sqp, fabric) = pair(options.size as usize);
    tweak(&mut fabric.borrow_mut());
    let mut client = Client::new(options);
    let mut server = Server::new(options);
    client.start(&mut cqp).unwrap();
    server.start(&mut sqp).unwrap();
    let mut out = Vec::new();
    let outcome = run_pair(
        &mut client,
        &mut cqp,
        &mut server,
        &mut sqp,
        &mut out,
        PATIENCE,
    );
    let receives = fabric.borrow().receives_total;
    // One receive per message each side takes, none left over.
    if outcome.is_ok() {
        assert_eq!(receives, [2 * options.count; 2]);
    }
    (
        outcome,
        client,
        server,
        String::from_utf8(out).unwrap(),
        cqp,
    )
}

#[test]
fn a_validated_run_moves_every_ping_intact() {
    let (outcome, client, server, out, mut cqp) = run(options(100, 64), |_| {});
    outcome.unwrap();
    assert_eq!(
        (client.pings(), client.errors(), server.pings()),
        (100, 0, 100)
    );
    assert!(out.is_empty(), "{out}");
    let mut sink = vec![0u8; 64];
    cqp.load(Buffer::Rdma, &mut sink).unwrap();
    let mut expected = vec![0u8; 64];
    fill_ping(&mut expected, 99);
    assert_eq!(sink, expected);
}

#[test]
fn validation_counts_a_corrupted_write() {
    let (outcome, client, _, out, _) = run(options(10, 100), |f| f.corrupt_write = Some(3));
    outcome.unwrap();
    assert_eq!((client.pings(), client.errors()), (10, 1));
    assert_eq!(out, "data mismatch! (ping 3)\n");
}

#[test]
fn without_validate_a_corruption_goes_unnoticed() {
    let o = Options {
        validate: false,
        ..options(10, 100)
    };
    let (outcome, client, ..) = run(o, |f| f.corrupt_write = Some(3));
    outcome.unwrap();
    assert_eq!(client.errors(), 0);
}

#[test]
fn verbose_prints_both_sides_ping_data() {
    let o = Options {
        verbose: true,
        ..options(2, 32)
    };
    let (outcome, _, _, out, _) = run(o, |_| {});
    outcome.unwrap();
    assert_eq!(
        out,
        "server ping data (64B max): |rdma-ping-0: ABCDEFGHIJKLMNOPQR|\n\
         ping data (64B max): |rdma-ping-0: ABCDEFGHIJKLMNOPQR|\n\
         server ping data (64B max): |rdma-ping-1: BCDEFGHIJKLMNOPQRS|\n\
         ping data (64B max): |rdma-ping-1: BCDEFGHIJKLMNOPQRS|\n"
    );
}

#[test]
fn a_lost_send_stalls_the_run_and_says_so() {
    let (outcome, client, ..) = run(options(5, 64), |f| f.lose_send = Some(4));
    assert!(
        matches!(outcome, Err(KrpingError::Stalled(_))),
        "{outcome:?}"
    );
    assert_eq!(client.pings(), 1);
}

#[test]
fn a_client_buffer_larger_than_the_servers_is_refused() {
    let (big_client, _, _) = pair(128);
    let (_, mut sqp, _) = pair(64);
    let mut server = Server::new(options(1, 64));
    server.start(&mut sqp).unwrap();
    let advertisement = Completion::Received {
        bytes: big_client.advertise(Buffer::Start).to_wire(),
        len: BUFFER_INFO_LEN,
    };
    let err = server_take(&mut server, &mut sqp, advertisement).unwrap_err();
    assert!(
        err.to_string()
            .contains("client advertised 128 bytes; this side's buffer has 64"),
        "{err}"
    );
}

#[test]
fn a_short_or_empty_advertisement_is_refused() {
    for (bytes, len, says) in [
        ([0u8; BUFFER_INFO_LEN], 8, "an advertisement of 8 bytes"),
        (
            [0u8; BUFFER_INFO_LEN],
            BUFFER_INFO_LEN,
            "advertised 0 bytes",
        ),
    ] {
        let (_, mut sqp, _) = pair(64);
        let mut server = Server::new(options(1, 64));
        let err =
            server_take(&mut server, &mut sqp, Completion::Received { bytes, len }).unwrap_err();
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[test]
fn a_completion_out_of_turn_is_a_protocol_error() {
    let (_, mut sqp, _) = pair(64);
    let mut server = Server::new(options(1, 64));
    let err = server_take(&mut server, &mut sqp, Completion::Written).unwrap_err();
    assert!(
        err.to_string().contains("Written while AwaitSource"),
        "{err}"
    );
    let (mut cqp, _, _) = pair(64);
    let mut client = Client::new(options(1, 64));
    client.step(&mut cqp, &mut Vec::new()).unwrap();
    let err = client_take(&mut client, &mut cqp, Completion::Read).unwrap_err();
    assert!(
        err.to_string().contains("Read while AwaitReadGoAhead"),
        "{err}"
    );
}

#[test]
fn a_failed_completion_stops_the_run_naming_the_side() {
    // The server never posts its first receive: the client's SEND meets no receive.
    let (mut cqp, mut sqp, _) = pair(64);
    let mut client = Client::new(options(1, 64));
    let mut server = Server::new(options(1, 64));
    client.start(&mut cqp).unwrap();
    let err = run_pair(
        &mut client,
        &mut cqp,
        &mut server,
        &mut sqp,
        &mut Vec::new(),
        PATIENCE,
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "client: RNR retry exceeded");
}

#[test]
fn run_side_reports_a_peer_that_never_answers() {
    // The server side has a receive posted but nobody serves: the client's first SEND lands
    // and then nothing comes back.
    let (mut cqp, mut sqp, _) = pair(64);
    sqp.post_recv().unwrap();
    let mut client = Client::new(options(1, 64));
    client.start(&mut cqp).unwrap();
    let err = run_side(
        Role::Client(&mut client),
        &mut cqp,
        &mut Vec::new(),
        PATIENCE,
    )
    .unwrap_err();
    assert!(matches!(err, KrpingError::Stalled(_)), "{err}");
    assert_eq!(client.pings(), 0);
}

#[test]
fn run_side_returns_at_once_for_a_finished_side() {
    let (_, mut sqp, _) = pair(64);
    let mut server = Server::new(Options {
        count: 0,
        ..options(1, 64)
    });
    server.state = ServerState::Finished;
    run_side(
        Role::Server(&mut server),
        &mut sqp,
        &mut Vec::new(),
        PATIENCE,
    )
    .unwrap();
}

/// A queue pair that hands out exactly one scripted completion.
struct Scripted<'a> {
    inner: &'a mut FakeQp,
    next: Option<Completion>,
}

impl<'a> Scripted<'a> {
    /// `qp` that answers its next poll with `completion`.
    fn once(qp: &'a mut FakeQp, completion: Completion) -> Self {
        Scripted {
            inner: qp,
            next: Some(completion),
        }
    }
}

impl KrpingQp for Scripted<'_> {
    type Error = String;
    fn advertise(&self, buffer: Buffer) -> BufferInfo {
        self.inner.advertise(buffer)
    }
    fn store(&mut self, buffer: Buffer, data: &[u8]) -> Result<(), String> {
        self.inner.store(buffer, data)
    }
    fn load(&mut self, buffer: Buffer, out: &mut [u8]) -> Result<(), String> {
        self.inner.load(buffer, out)
    }
    fn post_send(&mut self, m: &[u8; BUFFER_INFO_LEN]) -> Result<(), String> {
        self.inner.post_send(m)
    }
    fn post_recv(&mut self) -> Result<(), String> {
        self.inner.post_recv()
    }
    fn post_read(&mut self, into: Buffer, from: BufferInfo) -> Result<(), String> {
        self.inner.post_read(into, from)
    }
    fn post_write(&mut self, from: Buffer, to: BufferInfo) -> Result<(), String> {
        self.inner.post_write(from, to)
    }
    fn poll(&mut self) -> Result<Option<Completion>, String> {
        Ok(self.next.take())
    }
}

fn server_take(
    server: &mut Server,
    qp: &mut FakeQp,
    completion: Completion,
) -> Result<bool, KrpingError> {
    server.step(&mut Scripted::once(qp, completion), &mut Vec::new())
}

fn client_take(
    client: &mut Client,
    qp: &mut FakeQp,
    completion: Completion,
) -> Result<bool, KrpingError> {
    client.step(&mut Scripted::once(qp, completion), &mut Vec::new())
}
