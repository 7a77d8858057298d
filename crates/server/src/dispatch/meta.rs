//! Meta protocol dispatch (`mg ms md ma mn me`), called by the text dispatcher.
