import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;

/**
 * Apache Curator holding one lock until told to let go, for the doctor's tests
 * (tests/test_doctor_mixes.py compiles it at test time, as tests/test_interop.py does
 * CuratorPeer).
 *
 * <p>Usage: {@code java CuratorHolder HOSTS PATH RECIPE [MAX_LEASES]}, RECIPE being {@code
 * mutex} (InterProcessMutex) or {@code semaphore} (InterProcessSemaphoreV2 with MAX_LEASES). It
 * acquires, prints {@code held 0x<session id>}, waits for a line on stdin (or its end),
 * releases, closes its session and exits.
 */
public final class CuratorHolder {
    private CuratorHolder() {}

    public static void main(String[] args) throws Exception {
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(args[0], 10_000, 10_000, new RetryNTimes(3, 100));
        client.start();
        if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not connected to " + args[0]);
        }
        String path = args[1];
        InterProcessMutex mutex = null;
        Lease lease = null;
        if (args[2].equals("semaphore")) {
            lease = new InterProcessSemaphoreV2(client, path, Integer.parseInt(args[3])).acquire();
        } else {
            mutex = new InterProcessMutex(client, path);
            mutex.acquire();
        }
        long session = client.getZookeeperClient().getZooKeeper().getSessionId();
        System.out.println("held 0x" + Long.toHexString(session));
        System.out.flush();
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        if (lease != null) {
            lease.close();
        } else {
            mutex.release();
        }
        client.close();
    }
}
