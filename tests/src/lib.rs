//! Shared helpers of the privileged tests.
