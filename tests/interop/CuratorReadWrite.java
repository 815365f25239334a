import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryNTimes;

/**
 * Curator's side of tests/test_rwlock.py's interoperability test (compiled at test time).
 *
 * <p>Usage: {@code java CuratorReadWrite HOSTS PATH SECONDS THREADS}. Each thread loops on its
 * own {@code InterProcessReadWriteLock} on PATH, taking the read or the write lock at random,
 * for SECONDS after the client connected; then one line per critical section is printed:
 * {@code NAME MODE START END} (System.nanoTime(), CLOCK_MONOTONIC on Linux, like Python's
 * time.monotonic()).
 */
public final class CuratorReadWrite {
    private CuratorReadWrite() {}

    public static void main(String[] args) throws Exception {
        String hosts = args[0];
        String path = args[1];
        long stopAt;
        int threads = Integer.parseInt(args[3]);
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(hosts, 10_000, 5_000, new RetryNTimes(3, 100));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not connected in 30 s");
        }
        System.out.println("connected");
        System.out.flush();
        stopAt = System.nanoTime() + (long) (Double.parseDouble(args[2]) * 1e9);
        StringBuffer out = new StringBuffer();
        Thread[] workers = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final int index = t;
            final long until = stopAt;
            workers[t] = new Thread(() -> loop(client, path, index, until, out));
            workers[t].start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
        client.close();
        System.out.print(out);
        System.out.flush();
    }

    private static void loop(
            CuratorFramework client, String path, int index, long until, StringBuffer out) {
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
        Random rng = new Random(index);
        try {
            while (System.nanoTime() < until) {
                boolean write = rng.nextDouble() < 0.4;
                InterProcessMutex lock = write ? rw.writeLock() : rw.readLock();
                if (!lock.acquire(10, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("not acquired in 10 s");
                }
                try {
                    long start = System.nanoTime();
                    Thread.sleep(rng.nextInt(5));
                    long end = System.nanoTime();
                    out.append("c" + index + " " + (write ? "write" : "read") + " " + start + " "
                            + end + "\n");
                } finally {
                    lock.release();
                }
            }
        } catch (Exception e) {
            out.append("error " + e + "\n");
        }
    }
}
