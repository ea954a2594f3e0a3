package dev.monolock;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/** A loopback port that accepts connections, counts them and never answers. */
final class SilentPort implements AutoCloseable {
    private final ServerSocket socket;
    private final AtomicInteger accepted = new AtomicInteger();
    private final List<Socket> open = new ArrayList<>();

    SilentPort() throws IOException {
        socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread thread = new Thread(this::accept, "silent-port");
        thread.setDaemon(true);
        thread.start();
    }

    private void accept() {
        try {
            while (true) {
                Socket peer = socket.accept();
                accepted.incrementAndGet();
                synchronized (open) {
                    open.add(peer);
                }
            }
        } catch (IOException closed) {
            // The port was closed: the test is over.
        }
    }

    String address() {
        return "127.0.0.1:" + socket.getLocalPort();
    }

    int accepted() {
        return accepted.get();
    }

    /** A free loopback port with nothing listening (bound, then closed). */
    static String deadAddress() throws IOException {
        try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return "127.0.0.1:" + probe.getLocalPort();
        }
    }

    @Override
    public void close() throws IOException {
        socket.close();
        synchronized (open) {
            for (Socket peer : open) {
                peer.close();
            }
        }
    }
}
