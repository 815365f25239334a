import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;

/**
 * Apache Curator as a peer in aiozklock's interoperability tests (tests/test_interop.py
 * compiles it at test time; the protocol is tests/interop/peers.py's).
 *
 * <p>Usage: {@code java CuratorPeer HOSTS PATH RECIPE THREADS HOLD_MICROS [MAX_LEASES]}, RECIPE
 * being {@code mutex} (InterProcessMutex), {@code latch} (LeaderLatch) or {@code semaphore}
 * (InterProcessSemaphoreV2 with MAX_LEASES; one per thread). It connects, prints {@code
 * ready}, waits for a line on stdin, then each thread loops acquire → hold → release, printing
 * {@code held START} once it holds and {@code released START END} once it let go, until
 * another line on stdin (or its end); then it prints one JSON line: {@code {"intervals":
 * [[start, end], ...]}}. Times are System.nanoTime() values (CLOCK_MONOTONIC on Linux, as
 * Python's time.monotonic_ns()), so that intervals of several processes can be merged. A
 * thread that fails prints {@code error ...}.
 */
public final class CuratorPeer {
    private CuratorPeer() {}

    public static void main(String[] args) throws Exception {
        String hosts = args[0];
        String path = args[1];
        String recipe = args[2];
        int threads = Integer.parseInt(args[3]);
        long holdNanos = Long.parseLong(args[4]) * 1000;
        int maxLeases = args.length > 5 ? Integer.parseInt(args[5]) : 1;
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(hosts, 10_000, 10_000, new RetryNTimes(3, 100));
        client.start();
        if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not connected to " + hosts);
        }
        say("ready");
        BufferedReader stdin =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        stdin.readLine();
        AtomicBoolean stop = new AtomicBoolean();
        List<long[]> intervals = new ArrayList<>();
        List<Thread> workers = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            Thread worker =
                    new Thread(
                            () -> {
                                try {
                                    loop(client, path, recipe, maxLeases, stop, holdNanos, intervals);
                                } catch (Exception e) {
                                    say(("error " + e).replace('\n', ' '));
                                }
                            });
            workers.add(worker);
            worker.start();
        }
        stdin.readLine(); // "stop", or the end of stdin
        stop.set(true);
        for (Thread worker : workers) {
            worker.join();
        }
        client.close();
        StringBuilder out = new StringBuilder("{\"intervals\": [");
        synchronized (intervals) {
            for (int i = 0; i < intervals.size(); i++) {
                long[] interval = intervals.get(i);
                out.append(i == 0 ? "" : ", ").append('[').append(interval[0]).append(", ");
                out.append(interval[1]).append(']');
            }
        }
        say(out.append("]}").toString());
    }

    /** One whole line on stdout, flushed (println is atomic; the test reads line by line). */
    private static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    private static void loop(
            CuratorFramework client,
            String path,
            String recipe,
            int maxLeases,
            AtomicBoolean stop,
            long holdNanos,
            List<long[]> intervals)
            throws Exception {
        InterProcessMutex mutex = recipe.equals("mutex") ? new InterProcessMutex(client, path) : null;
        InterProcessSemaphoreV2 semaphore =
                recipe.equals("semaphore")
                        ? new InterProcessSemaphoreV2(client, path, maxLeases)
                        : null;
        while (!stop.get()) {
            LeaderLatch latch = null;
            Lease lease = null;
            if (semaphore != null) {
                lease = semaphore.acquire();
            } else if (mutex != null) {
                mutex.acquire();
            } else {
                latch = new LeaderLatch(client, path);
                latch.start();
                latch.await();
            }
            long start = System.nanoTime();
            say("held " + start);
            while (System.nanoTime() - start < holdNanos) {
                Thread.onSpinWait();
            }
            long stopped = System.nanoTime();
            if (lease != null) {
                lease.close();
            } else if (mutex != null) {
                mutex.release();
            } else {
                latch.close();
            }
            synchronized (intervals) {
                intervals.add(new long[] {start, stopped});
            }
            say("released " + start + " " + stopped);
        }
    }
}
