package org.apache.hadoop.hive.metastore;

import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantLock;

import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.conf.HiveConf.ConfVars;
import org.apache.hadoop.hive.thrift.TUGIContainingTransport;
import org.apache.thrift.TProcessor;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TServerEventHandler;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

/**
 * Hive 2.3's metastore Thrift server listening on the loopback interface only.
 *
 * <p>{@code HiveMetaStore.main} binds every interface and Hive 2.3 has no bind-host option. This
 * does what {@code main} and {@code startMetaStore} do for a plain server (no SASL, SSL, framed or
 * compact transport: the embedded default uses none), on a 127.0.0.1 socket. Hive's own private
 * pieces (the compactor/housekeeping threads, the connection event handler, the start signal)
 * are reused by reflection, so their behaviour stays Hive's.
 *
 * <p>Arguments as {@code HiveMetaStore}: {@code -p PORT} and {@code --hiveconf KEY=VALUE}.
 */
public final class LoopbackMetaStore {
  private LoopbackMetaStore() {}

  public static void main(String[] args) throws Throwable {
    int port = -1;
    Map<String, String> settings = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("-p") && i + 1 < args.length) {
        port = Integer.parseInt(args[++i]);
      } else if (args[i].equals("--hiveconf") && i + 1 < args.length) {
        String[] pair = args[++i].split("=", 2);
        settings.put(pair[0], pair.length > 1 ? pair[1] : "");
        System.setProperty(pair[0], settings.get(pair[0]));  // as HiveMetastoreCli does
      } else {
        throw new IllegalArgumentException("unknown argument " + args[i]);
      }
    }
    if (port <= 0) {
      throw new IllegalArgumentException("missing -p PORT");
    }
    HiveConf.setLoadMetastoreConfig(true);
    HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
    // As HiveMetaStore.main: the system properties reach only Hive's named settings.
    settings.forEach(conf::set);
    for (ConfVars unsupported : new ConfVars[] {ConfVars.METASTORE_USE_THRIFT_SASL,
        ConfVars.HIVE_METASTORE_USE_SSL, ConfVars.METASTORE_USE_THRIFT_FRAMED_TRANSPORT,
        ConfVars.METASTORE_USE_THRIFT_COMPACT_PROTOCOL}) {
      if (conf.getBoolVar(unsupported)) {
        throw new IllegalArgumentException(unsupported.varname + " is not supported by " + "LoopbackMetaStore");
      }
    }

    Lock startLock = new ReentrantLock();
    Condition startCondition = startLock.newCondition();
    AtomicBoolean startedServing = new AtomicBoolean();
    hive("startMetaStoreThreads", new Class<?>[] {HiveConf.class, Lock.class, Condition.class,
        AtomicBoolean.class}, conf, startLock, startCondition, startedServing);

    Field remote = HiveMetaStore.class.getDeclaredField("isMetaStoreRemote");
    remote.setAccessible(true);
    remote.setBoolean(null, true);
    long maxMessageSize = conf.getLongVar(ConfVars.METASTORESERVERMAXMESSAGESIZE);
    IHMSHandler handler = HiveMetaStore.newRetryingHMSHandler(
        new HiveMetaStore.HMSHandler("new db based metaserver", conf, false), conf);
    TTransportFactory transportFactory;
    TProcessor processor;
    if (conf.getBoolVar(ConfVars.METASTORE_EXECUTE_SET_UGI)) {
      transportFactory = new TUGIContainingTransport.Factory();
      processor = new TUGIBasedProcessor<IHMSHandler>(handler);
    } else {
      transportFactory = new TTransportFactory();
      processor = new TSetIpAddressProcessor<IHMSHandler>(handler);
    }
    TServerSocket socket = new TServerSocket(
        new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
    if (conf.getBoolVar(ConfVars.METASTORE_TCP_KEEP_ALIVE)) {
      socket = new TServerSocketKeepAlive(socket);
    }
    TServer server = new TThreadPoolServer(new TThreadPoolServer.Args(socket)
        .processor(processor)
        .transportFactory(transportFactory)
        .protocolFactory(new TBinaryProtocol.Factory())
        .inputProtocolFactory(new TBinaryProtocol.Factory(true, true, maxMessageSize, maxMessageSize))
        .minWorkerThreads(conf.getIntVar(ConfVars.METASTORESERVERMINTHREADS))
        .maxWorkerThreads(conf.getIntVar(ConfVars.METASTORESERVERMAXTHREADS)));
    // HiveMetaStore$3: closes a connection's thread-local RawStore when the client goes away.
    Constructor<?> events = Class.forName(HiveMetaStore.class.getName() + "$3").getDeclaredConstructor();
    events.setAccessible(true);
    server.setServerEventHandler((TServerEventHandler) events.newInstance());
    hive("signalOtherThreadsToStart", new Class<?>[] {TServer.class, Lock.class, Condition.class,
        AtomicBoolean.class}, server, startLock, startCondition, startedServing);
    HiveMetaStore.LOG.info("Started the metastore on " + socket.getServerSocket().getLocalSocketAddress());
    server.serve();
  }

  private static void hive(String name, Class<?>[] types, Object... values) throws Exception {
    Method method = HiveMetaStore.class.getDeclaredMethod(name, types);
    method.setAccessible(true);
    method.invoke(null, values);
  }
}
