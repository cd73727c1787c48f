"""RocketMQ 4.x remoting: frames, commands, and the TCP server and client that carry them."""
