//! island (being written)
