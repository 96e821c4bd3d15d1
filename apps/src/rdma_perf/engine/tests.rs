//! The measuring loops over a software pair of sides: every message posted is timed once, the
//! receives are kept posted without ever posting more than arrive, stamps that wrap still
//! land, and failures name their side.

use super::*;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

const PATIENCE: Duration = Duration::from_millis(200);

/// What both fake sides share.
#[derive(Default)]
struct Link {
    completions: [VecDeque<Result<Done, String>>; 2],
    recvs_posted: [Vec<u32>; 2],
    recvs_total: [Vec<u32>; 2],
    last_byte: [u8; 2],
    posts: [u32; 2],
    signaled: [u32; 2],
    /// A side whose posts are taken and never complete.
    deaf: Option<usize>,
    /// The post (counted per side from 0) that completes in error, and on which side.
    fail: Option<(usize, u32)>,
}

struct FakeSide {
    me: usize,
    link: Rc<RefCell<Link>>,
}

fn pair(qps: usize) -> (FakeSide, FakeSide, Rc<RefCell<Link>>) {
    let link = Rc::new(RefCell::new(Link::default()));
    for side in 0..2 {
        link.borrow_mut().recvs_posted[side] = vec![0; qps];
        link.borrow_mut().recvs_total[side] = vec![0; qps];
    }
    let side = |me| FakeSide {
        me,
        link: link.clone(),
    };
    (side(0), side(1), link)
}

impl PerfSide for FakeSide {
    type Error = String;

    fn post(&mut self, qp: usize, op: Op, signaled: bool, stamp: Option<u8>) -> Result<(), String> {
        let (me, peer) = (self.me, 1 - self.me);
        let mut link = self.link.borrow_mut();
        let n = link.posts[me];
        link.posts[me] += 1;
        if link.deaf == Some(me) {
            return Ok(());
        }
        if link.fail == Some((me, n)) {
            link.completions[me].push_back(Err("remote access error".into()));
            return Ok(());
        }
        match op {
            Op::Write => {
                if let Some(s) = stamp {
                    link.last_byte[peer] = s;
                }
            }
            Op::Send => {
                if link.recvs_posted[peer][qp] == 0 {
                    link.completions[me].push_back(Err("RNR retry exceeded".into()));
                    return Ok(());
                }
                link.recvs_posted[peer][qp] -= 1;
                link.completions[peer].push_back(Ok(Done { qp, recv: true }));
            }
            Op::Read => {}
        }
        if signaled {
            link.signaled[me] += 1;
            link.completions[me].push_back(Ok(Done { qp, recv: false }));
        }
        Ok(())
    }

    fn post_recv(&mut self, qp: usize, n: u32) -> Result<(), String> {
        let mut link = self.link.borrow_mut();
        link.recvs_posted[self.me][qp] += n;
        link.recvs_total[self.me][qp] += n;
        Ok(())
    }

    fn poll(&mut self, out: &mut [Done]) -> Result<usize, String> {
        let mut link = self.link.borrow_mut();
        let mut n = 0;
        while n < out.len() {
            match link.completions[self.me].pop_front() {
                Some(c) => {
                    out[n] = c?;
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }

    fn last_byte(&mut self, _qp: usize) -> Result<u8, String> {
        Ok(self.link.borrow().last_byte[self.me])
    }
}

#[test]
fn a_write_bandwidth_run_times_every_message_once() {
    let (mut a, mut b, link) = pair(1);
    let times = bandwidth(&mut a, &mut b, Op::Write, 1, 1000, PATIENCE).unwrap();
    assert_eq!((times.posted.len(), times.completed.len()), (1000, 1000));
    assert_eq!(link.borrow().signaled[0], 10);
    assert!(times.posted.windows(2).all(|w| w[0] <= w[1]));
    assert!(times
        .posted
        .iter()
        .zip(&times.completed)
        .all(|(p, c)| p <= c));
    super::super::BwReport::from_times(64, 1, &times.posted, &times.completed).unwrap();
}

#[test]
fn runs_that_are_no_multiple_of_the_signal_interval_end_with_a_signalled_message() {
    for iters in [5, 99, 101, 250] {
        let (mut a, mut b, link) = pair(2);
        let times = bandwidth(&mut a, &mut b, Op::Read, 2, iters, PATIENCE).unwrap();
        assert_eq!(times.completed.len(), 2 * iters as usize, "{iters}");
        assert_eq!(
            link.borrow().signaled[0],
            2 * iters.div_ceil(CQ_MOD),
            "{iters}"
        );
    }
}

#[test]
fn a_send_bandwidth_run_keeps_receives_posted_and_posts_no_more_than_arrive() {
    let (mut a, mut b, link) = pair(3);
    let times = bandwidth(&mut a, &mut b, Op::Send, 3, 2000, PATIENCE).unwrap();
    assert_eq!(times.completed.len(), 6000);
    let link = link.borrow();
    assert_eq!(link.recvs_total[1], vec![2000; 3]);
    assert_eq!(link.recvs_posted[1], vec![0; 3]);
    assert!(link.completions[1].is_empty());
}

#[test]
fn write_latency_stamps_wrap_and_still_land() {
    let (mut a, mut b, link) = pair(1);
    let samples = latency(&mut a, &mut b, Op::Write, 600, PATIENCE).unwrap();
    assert_eq!(samples.len(), 600);
    let link = link.borrow();
    // Iteration 599's stamp: 599 % 255 + 1.
    assert_eq!(link.last_byte, [90, 90]);
    assert_eq!(link.posts, [600, 600]);
    assert!(link.completions.iter().all(|q| q.is_empty()));
}

#[test]
fn send_latency_posts_exactly_one_receive_per_message() {
    let (mut a, mut b, link) = pair(1);
    let samples = latency(&mut a, &mut b, Op::Send, 50, PATIENCE).unwrap();
    assert_eq!(samples.len(), 50);
    let link = link.borrow();
    assert_eq!(link.recvs_total, [vec![50], vec![50]]);
    assert!(link.completions.iter().all(|q| q.is_empty()));
}

#[test]
fn read_latency_is_the_requester_alone() {
    let (mut a, mut b, link) = pair(1);
    let samples = latency(&mut a, &mut b, Op::Read, 20, PATIENCE).unwrap();
    assert_eq!(samples.len(), 20);
    assert_eq!(link.borrow().posts, [20, 0]);
}

#[test]
fn a_failed_completion_names_its_side() {
    let (mut a, mut b, link) = pair(1);
    link.borrow_mut().fail = Some((0, 150));
    let err = bandwidth(&mut a, &mut b, Op::Write, 1, 1000, PATIENCE).unwrap_err();
    assert_eq!(err.to_string(), "requester: remote access error");
    let (mut a, mut b, link) = pair(1);
    link.borrow_mut().fail = Some((1, 3));
    let err = latency(&mut a, &mut b, Op::Write, 10, PATIENCE).unwrap_err();
    assert_eq!(err.to_string(), "responder: remote access error");
}

#[test]
fn a_peer_that_never_answers_stalls_the_run() {
    let (mut a, mut b, link) = pair(1);
    link.borrow_mut().deaf = Some(1);
    let err = latency(&mut a, &mut b, Op::Send, 10, PATIENCE).unwrap_err();
    assert!(matches!(err, EngineError::Stalled(_)), "{err}");
    let (mut a, mut b, link) = pair(1);
    link.borrow_mut().deaf = Some(0);
    let err = bandwidth(&mut a, &mut b, Op::Write, 1, 1000, PATIENCE).unwrap_err();
    assert!(matches!(err, EngineError::Stalled(_)), "{err}");
}

#[test]
fn latency_ping_pongs_signal_one_message_in_cq_mod_and_the_last() {
    for op in [Op::Write, Op::Send] {
        let (mut a, mut b, link) = pair(1);
        latency(&mut a, &mut b, op, 250, PATIENCE).unwrap();
        // Messages 100, 200 and 250 on each side.
        assert_eq!(link.borrow().signaled, [3, 3], "{op:?}");
    }
    let (mut a, mut b, link) = pair(1);
    latency(&mut a, &mut b, Op::Read, 250, PATIENCE).unwrap();
    assert_eq!(link.borrow().signaled, [250, 0]);
}
