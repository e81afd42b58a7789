import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;

/**
 * Readiness probe used by up.sh: succeeds once the broker answers a real
 * Metadata/DescribeCluster request and lists at least one (unfenced) broker.
 * Usage: java -cp 'libs/*:probe' Probe 127.0.0.1:9092
 */
public class Probe {
  public static void main(String[] args) throws Exception {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args.length > 0 ? args[0] : "127.0.0.1:9092");
    p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
    p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
    p.put(AdminClientConfig.CLIENT_ID_CONFIG, "txbox-kafka-probe");
    try (Admin admin = Admin.create(p)) {
      int nodes = admin.describeCluster().nodes().get(5, TimeUnit.SECONDS).size();
      admin.listTopics().names().get(5, TimeUnit.SECONDS);
      if (nodes < 1) {
        System.err.println("no live brokers yet");
        System.exit(2);
      }
      System.out.println("ok brokers=" + nodes);
    } catch (Exception e) {
      System.err.println("not ready: " + e);
      System.exit(1);
    }
  }
}
