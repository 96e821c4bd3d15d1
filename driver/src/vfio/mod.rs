//! VFIO access to real PCI functions. (Being written.)
