package mqcore.javaclient;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * One phase of bench/remote.py's peer comparison, timed here (the JVM's start is not in it):
 * batch (sends of 32), one (sync sends one at a time) or consume (pulls of 32, every queue
 * from offset 0, as mqcore's PullConsumer does in the same bench).
 */
final class Bench {
    static final int BATCH = 32;

    private Bench() {
    }

    static void run(String ns, String topic, String phase, int n, int size) throws Exception {
        byte[] body = new byte[size];
        new Random(7).nextBytes(body);
        if (phase.equals("consume")) {
            consume(ns, topic);
            return;
        }
        DefaultMQProducer p = Scenarios.producer(ns, "PID_bench");
        p.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE); // the Python client sends as is
        try {
            p.send(new Message(topic, body)); // connect and route, untimed
            long begin = System.nanoTime();
            int moved = 0;
            if (phase.equals("batch")) {
                List<Message> batch = new ArrayList<>();
                for (int i = 0; i < BATCH; i++) {
                    batch.add(new Message(topic, body));
                }
                for (int i = 0; i < n / BATCH; i++) {
                    check(p.send(batch).getSendStatus());
                    moved += BATCH;
                }
            } else {
                Message m = new Message(topic, body);
                for (int i = 0; i < n; i++) {
                    check(p.send(m).getSendStatus());
                    moved++;
                }
            }
            emit(phase, moved, begin);
        } finally {
            p.shutdown();
        }
    }

    static void check(SendStatus status) {
        if (status != SendStatus.SEND_OK) {
            throw new IllegalStateException("send answered " + status);
        }
    }

    static void emit(String phase, int moved, long begin) {
        double seconds = (System.nanoTime() - begin) / 1e9;
        Json.emit("event", "bench", "phase", phase, "messages", moved, "seconds", seconds);
    }

    @SuppressWarnings("deprecation")
    static void consume(String ns, String topic) throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer("CID_bench");
        c.setNamesrvAddr(ns);
        c.setInstanceName("bench-" + System.nanoTime());
        c.start();
        try {
            List<MessageQueue> mqs = new ArrayList<>(c.fetchSubscribeMessageQueues(topic));
            long begin = System.nanoTime();
            int moved = 0;
            long bytes = 0;
            for (MessageQueue mq : mqs) {
                long offset = 0;
                while (true) {
                    PullResult r = c.pull(mq, "*", offset, BATCH);
                    if (r.getPullStatus() != PullStatus.FOUND) {
                        break;
                    }
                    for (MessageExt m : r.getMsgFoundList()) {
                        bytes += m.getBody().length; // read each body, as a consumer would
                    }
                    moved += r.getMsgFoundList().size();
                    offset = r.getNextBeginOffset();
                }
            }
            emit("consume", moved, begin);
        } finally {
            c.shutdown();
        }
    }
}
