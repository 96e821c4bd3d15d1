//! The README's first program: start a port on each of two modelled functions wired back to
//! back, send a burst from one, receive it on the other, close both.

use cxdirect::{Device, Mbuf, Options, Port, PortConfig, Started};
use cxdirect_apps::emulated::{open_emulated, Spec};
use cxdirect_emu::EmuConfig;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Two modelled ConnectX functions wired back to back, a port started on each.
    let mut functions = open_emulated(&Spec::EmuPair, EmuConfig::default());
    let (b, a) = (functions.pop().unwrap(), functions.pop().unwrap());
    let config = PortConfig::default();
    let Started {
        port: sender,
        queues: mut sending,
    } = Port::start(Device::bring_up(a, Options::default())?, config.clone())?;
    let Started {
        port: receiver,
        queues: mut receiving,
    } = Port::start(Device::bring_up(b, Options::default())?, config)?;

    // 32 broadcast frames of 64 bytes, numbered in their last byte.
    let mut burst: Vec<Mbuf> = Vec::new();
    for i in 0..32u8 {
        let mut frame = [0u8; 64];
        frame[..6].fill(0xff);
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes()); // local experimental EtherType
        frame[63] = i;
        let mut m = sender.pool().alloc().ok_or("no free buffer")?;
        m.set_data(&frame)?;
        burst.push(m);
    }
    while !burst.is_empty() {
        sending.tx[0].tx_burst(&mut burst); // sent packets leave the vector
    }

    // Receive them on the other port, in order.
    let mut got: Vec<Mbuf> = Vec::new();
    while got.len() < 32 {
        receiving.rx[0].rx_burst(&mut got, 32)?;
    }
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.to_vec()[63], i as u8);
    }
    println!("received {} frames", got.len());

    drop((got, sending, receiving));
    sender.close()?.teardown()?;
    receiver.close()?.teardown()?;
    Ok(())
}
