//! cxdirect: a userspace, poll-mode driver for NVIDIA ConnectX (mlx5) NICs reached through VFIO.
//!
//! This crate will hold PCI/VFIO access, the command interface, bring-up and teardown, firmware
//! pages, health monitoring, EQ/CQ/SQ/RQ/RMP management, memory keys, steering and the public
//! burst API. Nothing is implemented here yet.
