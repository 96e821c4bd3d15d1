//! A software RC fabric for the protocol's tests: two queue pairs whose SENDs land in the
//! peer's posted receives and whose READs and WRITEs copy between the two sides' buffers after
//! checking rkey and range, as a responder would. It can corrupt a chosen WRITE and drop a
//! chosen SEND.

use super::{Buffer, Completion, KrpingQp};
use crate::rdma::{BufferInfo, BUFFER_INFO_LEN};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

/// What both fake queue pairs share.
#[derive(Default)]
pub struct Fabric {
    memory: [HashMap<Buffer, Vec<u8>>; 2],
    completions: [VecDeque<Result<Completion, String>>; 2],
    receives_posted: [u32; 2],
    /// The WRITE (counted from 0) whose first byte is flipped on the way.
    pub corrupt_write: Option<u64>,
    writes: u64,
    /// The SEND (counted from 0, both sides together) that is lost, with its completion.
    pub lose_send: Option<u64>,
    sends: u64,
    /// Receives posted so far, per side.
    pub receives_total: [u64; 2],
}

/// One side's queue pair on the fabric: side 0 is the client, side 1 the server.
pub struct FakeQp {
    side: usize,
    fabric: Rc<RefCell<Fabric>>,
}

const BUFFERS: [Buffer; 2] = [Buffer::Start, Buffer::Rdma];

fn base(side: usize, buffer: Buffer) -> u64 {
    0x1000_0000 * (side as u64 + 1)
        + if buffer == Buffer::Rdma {
            0x100_0000
        } else {
            0
        }
}

fn rkey(side: usize, buffer: Buffer) -> u32 {
    ((side as u32) << 8) | if buffer == Buffer::Rdma { 2 } else { 1 }
}

/// Two connected fake queue pairs, each with buffers of `size` bytes, and their fabric.
pub fn pair(size: usize) -> (FakeQp, FakeQp, Rc<RefCell<Fabric>>) {
    let fabric = Rc::new(RefCell::new(Fabric::default()));
    for side in 0..2 {
        for buffer in BUFFERS {
            fabric.borrow_mut().memory[side].insert(buffer, vec![0; size]);
        }
    }
    let qp = |side| FakeQp {
        side,
        fabric: fabric.clone(),
    };
    (qp(0), qp(1), fabric)
}

impl FakeQp {
    fn peer(&self) -> usize {
        1 - self.side
    }

    /// The peer's buffer `info` names, and the offset into it; an error as a responder's
    /// remote access error.
    fn resolve(fabric: &Fabric, side: usize, info: BufferInfo) -> Result<(Buffer, usize), String> {
        let buffer = BUFFERS
            .into_iter()
            .find(|&b| rkey(side, b) == info.rkey)
            .ok_or("remote access error: unknown rkey")?;
        let offset = info
            .addr
            .checked_sub(base(side, buffer))
            .ok_or("remote access error: below the region")?;
        let len = fabric.memory[side][&buffer].len() as u64;
        if offset + u64::from(info.size) > len {
            return Err("remote access error: past the region".into());
        }
        Ok((buffer, offset as usize))
    }
}

impl KrpingQp for FakeQp {
    type Error = String;

    fn advertise(&self, buffer: Buffer) -> BufferInfo {
        let fabric = self.fabric.borrow();
        BufferInfo {
            addr: base(self.side, buffer),
            rkey: rkey(self.side, buffer),
            size: fabric.memory[self.side][&buffer].len() as u32,
        }
    }

    fn store(&mut self, buffer: Buffer, data: &[u8]) -> Result<(), String> {
        let mut fabric = self.fabric.borrow_mut();
        let mem = fabric.memory[self.side].get_mut(&buffer).unwrap();
        mem.get_mut(..data.len())
            .ok_or("store past the buffer")?
            .copy_from_slice(data);
        Ok(())
    }

    fn load(&mut self, buffer: Buffer, out: &mut [u8]) -> Result<(), String> {
        let fabric = self.fabric.borrow();
        let mem = &fabric.memory[self.side][&buffer];
        out.copy_from_slice(mem.get(..out.len()).ok_or("load past the buffer")?);
        Ok(())
    }

    fn post_send(&mut self, message: &[u8; BUFFER_INFO_LEN]) -> Result<(), String> {
        let (me, peer) = (self.side, self.peer());
        let mut fabric = self.fabric.borrow_mut();
        let n = fabric.sends;
        fabric.sends += 1;
        if fabric.lose_send == Some(n) {
            return Ok(());
        }
        if fabric.receives_posted[peer] == 0 {
            fabric.completions[me].push_back(Err("RNR retry exceeded".into()));
            return Ok(());
        }
        fabric.receives_posted[peer] -= 1;
        fabric.completions[peer].push_back(Ok(Completion::Received {
            bytes: *message,
            len: BUFFER_INFO_LEN,
        }));
        fabric.completions[me].push_back(Ok(Completion::Sent));
        Ok(())
    }

    fn post_recv(&mut self) -> Result<(), String> {
        let mut fabric = self.fabric.borrow_mut();
        fabric.receives_posted[self.side] += 1;
        fabric.receives_total[self.side] += 1;
        Ok(())
    }

    fn post_read(&mut self, into: Buffer, from: BufferInfo) -> Result<(), String> {
        let (me, peer) = (self.side, self.peer());
        let mut fabric = self.fabric.borrow_mut();
        let outcome = Self::resolve(&fabric, peer, from).map(|(buffer, offset)| {
            let data = fabric.memory[peer][&buffer][offset..offset + from.size as usize].to_vec();
            fabric.memory[me].get_mut(&into).unwrap()[..data.len()].copy_from_slice(&data);
            Completion::Read
        });
        fabric.completions[me].push_back(outcome);
        Ok(())
    }

    fn post_write(&mut self, from: Buffer, to: BufferInfo) -> Result<(), String> {
        let (me, peer) = (self.side, self.peer());
        let mut fabric = self.fabric.borrow_mut();
        let n = fabric.writes;
        fabric.writes += 1;
        let corrupt = fabric.corrupt_write == Some(n);
        let outcome = Self::resolve(&fabric, peer, to).map(|(buffer, offset)| {
            let mut data = fabric.memory[me][&from][..to.size as usize].to_vec();
            if corrupt {
                data[0] ^= 0xff;
            }
            fabric.memory[peer].get_mut(&buffer).unwrap()[offset..offset + data.len()]
                .copy_from_slice(&data);
            Completion::Written
        });
        fabric.completions[me].push_back(outcome);
        Ok(())
    }

    fn poll(&mut self) -> Result<Option<Completion>, String> {
        self.fabric.borrow_mut().completions[self.side]
            .pop_front()
            .transpose()
    }
}
