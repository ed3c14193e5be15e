//! Stage-2 translation tables: layout and descriptors for a domain's guest-physical map.
