package mqcore.javaclient;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Scenarios of RocketMQ's Java client against a server, one group per JVM:
 * {@code Scenarios NAME NAMESRV ARGS...}. Each prints JSON lines that the Python tests check;
 * anything else on stdout is ignored by them.
 */
public final class Scenarios {
    private Scenarios() {
    }

    public static void main(String[] args) throws Exception {
        String name = args[0];
        String ns = args[1];
        String[] rest = new String[args.length - 2];
        System.arraycopy(args, 2, rest, 0, rest.length);
        switch (name) {
            case "produce":
                produce(ns, rest[0]);
                break;
            case "send":
                send(ns, rest[0], Integer.parseInt(rest[1]), Integer.parseInt(rest[2]));
                break;
            case "push":
                push(ns, rest[0], rest[1], rest[2], Integer.parseInt(rest[3]),
                        Integer.parseInt(rest[4]));
                break;
            case "consume":
                consume(ns, rest[0], rest[1], Integer.parseInt(rest[2]));
                break;
            case "lite":
                lite(ns, rest[0], rest[1], rest[2], Integer.parseInt(rest[3]));
                break;
            case "bench":
                Bench.run(ns, rest[0], rest[1], Integer.parseInt(rest[2]),
                        Integer.parseInt(rest[3]));
                break;
            case "transaction":
                Transactions.run(ns, rest[0], rest[1]);
                break;
            case "admin":
                Admin.run(ns, rest[0], rest[1]);
                break;
            default:
                throw new IllegalArgumentException("unknown scenario " + name);
        }
        Json.emit("event", "done", "scenario", name);
        System.exit(0); // the clients' non-daemon threads would keep the JVM up
    }

    static DefaultMQProducer producer(String ns, String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(ns);
        p.setInstanceName(group + "-" + System.nanoTime());
        // 3 s by default, for all tries of a send: a JVM's first sends (class loading, the
        // JIT) on a loaded test machine can take longer, and latency is not what is tested.
        p.setSendMsgTimeout(15_000);
        p.start();
        return p;
    }

    static Map<String, Object> sent(String kind, String body, SendResult r) {
        return Json.obj("event", "sent", "kind", kind, "body", body,
                "status", r.getSendStatus().name(), "msgId", r.getMsgId(),
                "offsetMsgId", r.getOffsetMsgId(), "queueId", r.getMessageQueue().getQueueId(),
                "queueOffset", r.getQueueOffset());
    }

    static void emit(Map<String, Object> m) {
        Object[] kv = new Object[m.size() * 2];
        int i = 0;
        for (Map.Entry<String, Object> e : m.entrySet()) {
            kv[i++] = e.getKey();
            kv[i++] = e.getValue();
        }
        Json.emit(kv);
    }

    static Message msg(String topic, String tag, String key, String body) {
        Message m = new Message(topic, tag, key, body.getBytes(StandardCharsets.UTF_8));
        return m;
    }

    /** Every way DefaultMQProducer sends, each message's body naming how it was sent. */
    static void produce(String ns, String topic) throws Exception {
        DefaultMQProducer p = producer(ns, "PID_java_produce");
        try {
            for (int i = 0; i < 4; i++) {
                String body = "sync-" + i;
                Message m = msg(topic, "TagA", "key-" + body, body);
                m.putUserProperty("i", String.valueOf(i));
                emit(sent("sync", body, p.send(m)));
            }
            // Past compressMsgBodyOverHowmuch (4 KiB): the client sends it compressed.
            StringBuilder big = new StringBuilder("big-");
            while (big.length() < 10_000) {
                big.append("0123456789");
            }
            emit(sent("sync", big.toString(), p.send(msg(topic, "TagA", "key-big", big.toString()))));

            CountDownLatch done = new CountDownLatch(4);
            for (int i = 0; i < 4; i++) {
                final String body = "async-" + i;
                p.send(msg(topic, "TagB", "key-" + body, body), new SendCallback() {
                    @Override
                    public void onSuccess(SendResult r) {
                        emit(sent("async", body, r));
                        done.countDown();
                    }

                    @Override
                    public void onException(Throwable e) {
                        Json.emit("event", "error", "kind", "async", "body", body,
                                "error", String.valueOf(e));
                        done.countDown();
                    }
                });
            }
            if (!done.await(30, TimeUnit.SECONDS)) {
                Json.emit("event", "error", "kind", "async", "error", "callbacks missing");
            }

            for (int i = 0; i < 2; i++) {
                String body = "oneway-" + i;
                p.sendOneway(msg(topic, "TagB", "key-" + body, body));
                Json.emit("event", "sent", "kind", "oneway", "body", body);
            }

            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < 8; i++) {
                batch.add(msg(topic, "TagC", "key-batch-" + i, "batch-" + i));
            }
            SendResult br = p.send(batch);
            Map<String, Object> b = sent("batch", "batch-*", br);
            b.put("count", batch.size());
            emit(b);

            for (int i = 0; i < 12; i++) {
                String body = "ordered-" + i;
                SendResult r = p.send(msg(topic, "TagD", "key-" + body, body),
                        (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size()), i % 3);
                Map<String, Object> s = sent("selector", body, r);
                s.put("orderId", i % 3);
                emit(s);
            }

            for (int level = 1; level <= 2; level++) {
                String body = "delay-" + level;
                Message m = msg(topic, "TagE", "key-" + body, body);
                m.setDelayTimeLevel(level);
                Map<String, Object> s = sent("delay", body, p.send(m));
                s.put("level", level);
                emit(s);
            }
        } finally {
            p.shutdown();
        }
    }

    /** Sync sends of bodies m-START .. m-(START+COUNT-1). */
    static void send(String ns, String topic, int start, int count) throws Exception {
        DefaultMQProducer p = producer(ns, "PID_java_send");
        try {
            for (int i = start; i < start + count; i++) {
                String body = "m-" + i;
                emit(sent("sync", body, p.send(msg(topic, "TagA", "k-" + i, body))));
            }
        } finally {
            p.shutdown();
        }
    }

    static Map<String, Object> received(int consumer, MessageExt m) {
        return Json.obj("event", "received", "consumer", consumer,
                "body", new String(m.getBody(), StandardCharsets.UTF_8), "tags", m.getTags(),
                "keys", m.getKeys(), "topic", m.getTopic(), "queueId", m.getQueueId(),
                "queueOffset", m.getQueueOffset(), "msgId", m.getMsgId(),
                "reconsumeTimes", m.getReconsumeTimes(), "a", m.getUserProperty("a"),
                "thread", Thread.currentThread().getName(),
                "bornTimestamp", m.getBornTimestamp(), "storeTimestamp", m.getStoreTimestamp(),
                "now", System.currentTimeMillis());
    }

    /** Waits until COUNT events were seen and none came for QUIET ms (60 s at most). */
    static final class Quiet {
        final AtomicLong seen = new AtomicLong();
        final AtomicLong last = new AtomicLong(System.currentTimeMillis());

        void hit() {
            seen.incrementAndGet();
            last.set(System.currentTimeMillis());
        }

        void await(long count, long quietMs) throws InterruptedException {
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline) {
                if (seen.get() >= count && System.currentTimeMillis() - last.get() >= quietMs) {
                    return;
                }
                Thread.sleep(50);
            }
        }
    }

    static DefaultMQPushConsumer pushConsumer(String ns, String group, String instance) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        return c;
    }

    /**
     * A push scenario: consumers start, COUNT messages are sent (tags TagA/TagB alternating,
     * property a = i), and the consumers run until EXPECTED deliveries were seen and none came
     * for a while. MODE: tag:EXPR, sql:EXPR, orderly, cluster (two members), broadcast (two
     * members), dlq (every delivery fails; maxReconsumeTimes 1).
     */
    static void push(String ns, String topic, String group, String mode, int count, int expected)
            throws Exception {
        int members = mode.equals("cluster") || mode.equals("broadcast") ? 2 : 1;
        Quiet quiet = new Quiet();
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        for (int n = 0; n < members; n++) {
            final int id = n;
            DefaultMQPushConsumer c = pushConsumer(ns, group, group + "-" + n);
            if (mode.startsWith("sql:")) {
                c.subscribe(topic, MessageSelector.bySql(mode.substring(4)));
            } else if (mode.startsWith("tag:")) {
                c.subscribe(topic, mode.substring(4));
            } else {
                c.subscribe(topic, "*");
            }
            if (mode.equals("broadcast")) {
                broadcasting(c);
            }
            if (mode.equals("orderly")) {
                c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        emit(received(id, m));
                        quiet.hit();
                    }
                    return ConsumeOrderlyStatus.SUCCESS;
                });
            } else if (mode.equals("dlq")) {
                c.setMaxReconsumeTimes(1);
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        emit(received(id, m));
                        quiet.hit();
                    }
                    ctx.setDelayLevelWhenNextConsume(1); // retry after 1 s, not level 3's 10 s
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                });
            } else {
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        emit(received(id, m));
                        quiet.hit();
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
            }
            c.start();
            consumers.add(c);
        }
        if (mode.equals("cluster")) {
            awaitSplit(consumers, topic);
        }
        DefaultMQProducer p = producer(ns, "PID_java_push");
        try {
            for (int i = 0; i < count; i++) {
                String body = "m-" + i;
                Message m = msg(topic, i % 2 == 0 ? "TagA" : "TagB", "k-" + i, body);
                m.putUserProperty("a", String.valueOf(i));
                SendResult r;
                if (mode.equals("orderly")) {
                    r = p.send(m, (mqs, x, arg) -> mqs.get((Integer) arg % mqs.size()), i % 2);
                } else {
                    r = p.send(m);
                }
                emit(sent("sync", body, r));
            }
        } finally {
            p.shutdown();
        }
        quiet.await(expected, mode.equals("dlq") ? 4000 : 1500);
        for (DefaultMQPushConsumer c : consumers) {
            c.shutdown();
        }
    }

    /** MessageModel moved package between the 4.x and 5.x clients: set it by name. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static void broadcasting(DefaultMQPushConsumer c) throws Exception {
        Class model = DefaultMQPushConsumer.class.getMethod("getMessageModel").getReturnType();
        DefaultMQPushConsumer.class.getMethod("setMessageModel", model)
                .invoke(c, Enum.valueOf(model, "BROADCASTING"));
    }

    /** Until the two members of a clustering group each own some queues of TOPIC, none twice. */
    static void awaitSplit(List<DefaultMQPushConsumer> consumers, String topic)
            throws InterruptedException {
        long deadline = System.currentTimeMillis() + 45_000;
        while (System.currentTimeMillis() < deadline) {
            List<Set<MessageQueue>> owned = new ArrayList<>();
            int total = 0;
            Set<MessageQueue> union = new HashSet<>();
            for (DefaultMQPushConsumer c : consumers) {
                Set<MessageQueue> mine = new HashSet<>();
                for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl()
                        .getProcessQueueTable().keySet()) {
                    if (mq.getTopic().equals(topic)) {
                        mine.add(mq);
                    }
                }
                owned.add(mine);
                total += mine.size();
                union.addAll(mine);
            }
            boolean split = total == union.size() && total > 0;
            for (Set<MessageQueue> s : owned) {
                split &= !s.isEmpty();
            }
            if (split) {
                List<Object> sizes = new ArrayList<>();
                for (Set<MessageQueue> s : owned) {
                    sizes.add(s.size());
                }
                Json.emit("event", "split", "queues", sizes);
                return;
            }
            Thread.sleep(100);
        }
        Json.emit("event", "error", "error", "the group's members never split the queues");
    }

    /** A clustering member of GROUP consuming until EXPECTED messages and a quiet second. */
    static void consume(String ns, String topic, String group, int expected) throws Exception {
        Quiet quiet = new Quiet();
        DefaultMQPushConsumer c = pushConsumer(ns, group, group + "-0");
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emit(received(0, m));
                quiet.hit();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        quiet.await(expected, 2000);
        c.shutdown(); // commits the offsets
    }

    /**
     * DefaultLitePullConsumer: COUNT messages are sent, then MODE subscribe reads them all
     * (committing), or MODE assign takes every queue and seeks each to offset 2.
     */
    static void lite(String ns, String topic, String group, String mode, int count)
            throws Exception {
        DefaultMQProducer p = producer(ns, "PID_java_lite");
        try {
            for (int i = 0; i < count; i++) {
                emit(sent("sync", "m-" + i, p.send(msg(topic, "TagA", "k-" + i, "m-" + i))));
            }
        } finally {
            p.shutdown();
        }
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(group + "-0");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        int expected = count;
        if (mode.equals("subscribe")) {
            c.subscribe(topic, "*");
            c.start();
        } else {
            c.setAutoCommit(false);
            c.start();
            Collection<MessageQueue> mqs = c.fetchMessageQueues(topic);
            c.assign(mqs);
            for (MessageQueue mq : mqs) {
                c.seek(mq, 2);
            }
            Json.emit("event", "assigned", "queues", mqs.size());
            expected = count - 2 * mqs.size();
        }
        Set<String> bodies = new HashSet<>();
        long deadline = System.currentTimeMillis() + 30_000;
        while (bodies.size() < expected && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll(1000)) {
                emit(received(0, m));
                bodies.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
        }
        // One more poll: nothing past what was expected may come.
        for (MessageExt m : c.poll(500)) {
            emit(received(0, m));
        }
        if (mode.equals("subscribe")) {
            c.commitSync();
            Map<MessageQueue, Long> committed = new ConcurrentHashMap<>();
            for (MessageQueue mq : c.fetchMessageQueues(topic)) {
                committed.put(mq, c.committed(mq));
            }
            long sum = 0;
            for (long v : committed.values()) {
                sum += Math.max(v, 0);
            }
            Json.emit("event", "committed", "sum", sum);
        }
        c.shutdown();
    }
}
