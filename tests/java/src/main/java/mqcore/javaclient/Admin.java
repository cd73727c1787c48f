package mqcore.javaclient;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/** DefaultMQAdminExt as the mqadmin tool drives it. The protocol classes moved package
 * between the 4.x and 5.x clients: they are never named here ({@code var}), so one source
 * builds against both. */
final class Admin {
    /** ResponseCode.CONSUMER_NOT_ONLINE (its class moved between the 4.x and 5.x lines). */
    static final int CONSUMER_NOT_ONLINE = 206;

    private Admin() {
    }

    static void run(String ns, String topic, String group) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(ns);
        admin.setInstanceName("admin-" + System.nanoTime());
        admin.start();
        try {
            var cluster = admin.examineBrokerClusterInfo();
            List<String> masters = new ArrayList<>();
            for (var bd : cluster.getBrokerAddrTable().values()) {
                masters.add(bd.getBrokerAddrs().get(0L));
            }
            Json.emit("event", "cluster", "masters", masters,
                    "clusters", new ArrayList<>(cluster.getClusterAddrTable().keySet()));

            // updateTopic -c: on every master
            TopicConfig tc = new TopicConfig(topic, 8, 8, 6);
            for (String addr : masters) {
                admin.createAndUpdateTopicConfig(addr, tc);
            }
            Json.emit("event", "topicList",
                    "has", admin.fetchAllTopicList().getTopicList().contains(topic));

            var route = admin.examineTopicRouteInfo(topic);
            List<Object> queues = new ArrayList<>();
            for (var qd : route.getQueueDatas()) {
                queues.add(Json.obj("broker", qd.getBrokerName(), "read", qd.getReadQueueNums(),
                        "write", qd.getWriteQueueNums(), "perm", qd.getPerm()));
            }
            List<Object> brokers = new ArrayList<>();
            for (var bd : route.getBrokerDatas()) {
                brokers.add(Json.obj("broker", bd.getBrokerName(),
                        "master", bd.getBrokerAddrs().get(0L)));
            }
            Json.emit("event", "route", "queues", queues, "brokers", brokers);

            long before = System.currentTimeMillis() - 1;
            List<SendResult> sent = new ArrayList<>();
            DefaultMQProducer p = Scenarios.producer(ns, "PID_java_admin");
            try {
                for (int i = 0; i < 10; i++) {
                    Message m = new Message(topic, "TagA", "order-" + i,
                            ("order " + i).getBytes(StandardCharsets.UTF_8));
                    sent.add(p.send(m));
                }
            } finally {
                p.shutdown();
            }
            Json.emit("event", "sent", "count", sent.size());

            consumeAll(ns, topic, group, 10);

            var stats = admin.examineTopicStats(topic);
            long max = 0;
            for (var o : stats.getOffsetTable().values()) {
                max += o.getMaxOffset() - o.getMinOffset();
            }
            Json.emit("event", "topicStats", "queues", stats.getOffsetTable().size(),
                    "messages", max);

            emitProgress(admin, group, "progress");

            SendResult third = sent.get(3);
            MessageExt byOffsetId = admin.viewMessage(topic, third.getOffsetMsgId());
            Json.emit("event", "viewByOffsetId", "body", body(byOffsetId),
                    "keys", byOffsetId.getKeys());
            MessageExt byUniqId = admin.viewMessage(topic, third.getMsgId());
            Json.emit("event", "viewByUniqId", "body", body(byUniqId),
                    "msgId", byUniqId.getMsgId());
            var byKey = admin.queryMessage(topic, "order-5", 32, 0, Long.MAX_VALUE);
            List<Object> bodies = new ArrayList<>();
            for (MessageExt m : byKey.getMessageList()) {
                bodies.add(body(m));
            }
            Json.emit("event", "queryByKey", "bodies", bodies);

            // resetOffsetByTime, as mqadmin: the broker resets its online members; a group
            // with none online is answered CONSUMER_NOT_ONLINE, and the tool resets the
            // committed offsets itself.
            String path;
            try {
                var table = admin.resetOffsetByTimestamp(topic, group,
                        before, true);
                path = "broker:" + table.size();
            } catch (MQClientException e) {
                if (e.getResponseCode() != CONSUMER_NOT_ONLINE) {
                    throw e;
                }
                admin.resetOffsetByTimestampOld(group, topic, before, true);
                path = "old";
            }
            Json.emit("event", "reset", "path", path);
            emitProgress(admin, group, "progressAfterReset");
        } finally {
            admin.shutdown();
        }
    }

    static String body(MessageExt m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    static void emitProgress(DefaultMQAdminExt admin, String group, String event)
            throws Exception {
        var cs = admin.examineConsumeStats(group);
        long broker = 0;
        long consumer = 0;
        for (var w : cs.getOffsetTable().values()) {
            broker += w.getBrokerOffset();
            consumer += w.getConsumerOffset();
        }
        Json.emit("event", event, "queues", cs.getOffsetTable().size(), "brokerOffset", broker,
                "consumerOffset", consumer, "diff", cs.computeTotalDiff());
    }

    static void consumeAll(String ns, String topic, String group, int expected)
            throws Exception {
        Scenarios.Quiet quiet = new Scenarios.Quiet();
        DefaultMQPushConsumer c = Scenarios.pushConsumer(ns, group, group + "-admin");
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                quiet.hit();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        quiet.await(expected, 1000);
        c.shutdown();
        Json.emit("event", "consumed", "count", quiet.seen.get());
    }
}
