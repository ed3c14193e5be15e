//! Domain and cpupool configuration: the data compiled into the image, and its checks.
