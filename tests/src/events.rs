//! What the driver should report for a raw event the model posts, read from the PRM's EQE
//! layouts rather than from the driver's decoder: the oracle of the hostile-event property test
//! and fuzz target.

use cxdirect::Event;
use cxdirect_hw::eqe::{port_change, EventType};

/// The event types the driver's async EQ subscribes to (the model posts a raw event only to an
/// EQ subscribed to its type; types 64 and up go to the async EQ).
pub const SUBSCRIBED: [EventType; 10] = cxdirect::control::ASYNC_EVENTS;

/// True when the model posts an event of this type to the driver's async EQ.
pub fn delivered(event_type: u8) -> bool {
    event_type >= 64 || SUBSCRIBED.iter().any(|&t| t as u8 == event_type)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// What the driver should make of a raw event, read from the PRM's EQE layouts (not from the
/// driver's decoder): `None` for command completions, which are bookkeeping and not reported.
pub fn expected(event_type: u8, sub_type: u8, data: &[u8; 28]) -> Option<Event> {
    let Ok(kind) = EventType::try_from(event_type) else {
        return Some(Event::Invalid {
            raw_type: event_type,
        });
    };
    Some(match kind {
        EventType::Cmd => return None,
        EventType::PageRequest => {
            let func_id = u16::from_be_bytes([data[2], data[3]]);
            let pages = be32(&data[4..8]) as i32;
            if func_id == 0 && pages.unsigned_abs() <= 1 << 20 {
                Event::PageRequest { pages }
            } else {
                Event::Invalid {
                    raw_type: event_type,
                }
            }
        }
        EventType::PortChange => match sub_type {
            port_change::ACTIVE => Event::PortChange { up: true },
            port_change::DOWN => Event::PortChange { up: false },
            _ => Event::Other(kind),
        },
        EventType::CqError => Event::CqError {
            cqn: be32(&data[0..4]) & 0x00ff_ffff,
            syndrome: data[11],
        },
        // No shared ring exists on this device: a limit event naming one is refused.
        EventType::SrqRqLimit => Event::Invalid {
            raw_type: event_type,
        },
        EventType::WqCatastrophicError
        | EventType::WqInvalidRequestError
        | EventType::WqAccessError
        | EventType::SrqCatastrophicError => Event::QueueError {
            kind,
            number: be32(&data[24..28]) & 0x00ff_ffff,
        },
        _ => Event::Other(kind),
    })
}
