package org.apache.hadoop.hive.metastore;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.Field;
import java.lang.reflect.UndeclaredThrowableException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Callable;
import java.util.concurrent.locks.ReentrantReadWriteLock;

import javax.jdo.JDODataStoreException;
import javax.jdo.PersistenceManager;
import javax.jdo.datastore.JDOConnection;

import org.apache.hadoop.hive.metastore.api.FieldSchema;
import org.apache.hadoop.hive.metastore.api.InvalidInputException;
import org.apache.hadoop.hive.metastore.api.InvalidObjectException;
import org.apache.hadoop.hive.metastore.api.MetaException;
import org.apache.hadoop.hive.metastore.api.NoSuchObjectException;
import org.apache.hadoop.hive.metastore.api.Partition;
import org.apache.hadoop.hive.metastore.api.SerDeInfo;
import org.apache.hadoop.hive.metastore.api.SkewedInfo;
import org.apache.hadoop.hive.metastore.api.StorageDescriptor;
import org.apache.hadoop.hive.metastore.api.Table;
import org.apache.hadoop.hive.metastore.model.MPartition;
import org.apache.hadoop.hive.metastore.model.MStorageDescriptor;
import org.apache.hadoop.hive.metastore.partition.spec.PartitionSpecProxy;
import org.apache.hive.common.util.HiveStringUtils;
import org.apache.thrift.TException;

/**
 * Hive 2.3's ObjectStore whose table reads and partition listings never see half of a write.
 *
 * <p>Derby has no snapshots: its read-committed scan of a table's partitions can read some rows
 * before a multi-partition write, wait on a row the write holds, and read the rest after it
 * commits (an old prefix and a new suffix). A scan that meets a dropped partition's half-deleted
 * rows returns it without its values, or fails. A table read is several statements: it can join
 * the location of one {@code alter_table} to the parameters (schema, revision) of the next.
 * Repeatable-read would hold the scans' locks, but DataNucleus's non-transactional reads break
 * under it in Hive 2.3. An embedded Derby database is open in one JVM only, so a JVM-wide
 * read/write lock is exact: a table read or partition listing that is not part of a write holds
 * the read side for its call, and a write ({@code alterTable}, the compare-and-set's
 * {@code updateParameterWithExpectedValue}, {@code dropTable}, {@code alterPartition(s)},
 * {@code addPartition(s)}, {@code dropPartition(s)}) takes the write side until its enclosing
 * transaction ends (the handlers commit after these methods return). Reads inside a transaction
 * (a write's own reads) take no lock: they may hold row locks that the lock holder waits for,
 * and they need no snapshot.
 *
 * <p>An {@code alterPartitions} that only moves partitions (new locations, parameters and times:
 * a partition commit's switch) is written with a few batched statements in the same transaction
 * instead of DataNucleus's per-partition loads and copies; the rows end as Hive's write leaves
 * them (see {@link #alterPartitions}).
 *
 * <p>An {@code alterPartitions} sent with expectations ({@link #EXPECTED}, set by
 * {@link BatchedAlterHandler} from the call's EnvironmentContext) is a compare-and-set: under the
 * write side, in its transaction, it lands only while the table's revision, the partitions inside
 * the writer's spec and their locations are those the writer read, and no writer holds the
 * table's metastore lock. A writer that switches partitions in this one call needs no lock.
 */
public class SnapshotReadsStore extends ObjectStore {
  private static final ReentrantReadWriteLock SWITCH = new ReentrantReadWriteLock(true);
  // ObjectStore keeps its PersistenceManager, whose transaction the direct writes join, private.
  private static final Field PERSISTENCE_MANAGER = persistenceManagerField();
  // ObjectStore's updateParameterWithExpectedValue, from Hive 2.3.10 on (pyspark 4's jars); null before.
  private static final MethodHandle SUPER_UPDATE_PARAMETER_WITH_EXPECTED_VALUE = superUpdateParameterWithExpectedValue();
  private static final String ALTER_FAILED = "The transaction for alter partition did not commit successfully.";

  /** The expectations of the {@code alterPartitions} under way in this thread (see above). */
  static final ThreadLocal<Map<String, String>> EXPECTED = new ThreadLocal<>();
  static final String EXPECT_REVISION = "staged.expect.revision";
  static final String EXPECT_SPEC = "staged.expect.spec.";  // + column: the spec's value
  static final String EXPECT_PARTITION = "staged.expect.partition.";  // + name: its location
  static final String REVISION_KEY = "staged.revision";
  private static final String CHANGED = "changed since this writer read them";  // metastore.client knows it

  private boolean holdsSwitch;

  @SuppressWarnings("unchecked")
  private static <E extends Exception> RuntimeException rethrow(Exception e) throws E {
    throw (E) e;  // the store call's own checked exceptions pass through unchanged
  }

  private static MethodHandle superUpdateParameterWithExpectedValue() {
    MethodType type = MethodType.methodType(long.class, Table.class, String.class, String.class, String.class);
    try {
      return MethodHandles.lookup().findSpecial(
          ObjectStore.class, "updateParameterWithExpectedValue", type, SnapshotReadsStore.class);
    } catch (NoSuchMethodException e) {
      return null;
    } catch (IllegalAccessException e) {
      throw new IllegalStateException(e);
    }
  }

  /** {@code lookup} under the read side, unless it is part of a transaction (see above). */
  private <T> T read(Callable<T> lookup) {
    boolean outsideWrite = !isActiveTransaction();
    if (outsideWrite) {
      SWITCH.readLock().lock();
    }
    try {
      return lookup.call();
    } catch (Exception e) {
      throw SnapshotReadsStore.<RuntimeException>rethrow(e);
    } finally {
      if (outsideWrite) {
        SWITCH.readLock().unlock();
      }
    }
  }

  private void releaseSwitchIfDone() {
    if (holdsSwitch && !isActiveTransaction()) {
      holdsSwitch = false;
      SWITCH.writeLock().unlock();
    }
  }

  /** {@code change} under the write side, held until its enclosing transaction ends. */
  private <T> T write(Callable<T> change) {
    if (!holdsSwitch) {
      SWITCH.writeLock().lock();
      holdsSwitch = true;
    }
    try {
      return change.call();
    } catch (Exception e) {
      throw SnapshotReadsStore.<RuntimeException>rethrow(e);
    } finally {
      releaseSwitchIfDone();  // called outside a transaction: it committed or rolled back itself
    }
  }

  /**
   * Hive's {@code alterPartitions}, or, when every partition changes only its location, parameters
   * and times (what a partition commit's switch does), the same result written with a few batched
   * statements on this transaction's connection. Hive's own write loads each partition's object
   * graph through DataNucleus and copies its storage descriptor field by field: ~80% of the call
   * (benchmarks/RESULTS.md). Either way it is one transaction under the write side.
   */
  @Override
  public void alterPartitions(String db, String table, List<List<String>> values, List<Partition> parts)
      throws InvalidObjectException, MetaException {
    write(() -> {
      boolean committed = false;
      openTransaction();
      try {
        checkExpected(db, table);
        List<Move> moves = moves(db, table, values, parts);
        if (moves == null) {
          super.alterPartitions(db, table, values, parts);  // fails, and rolls back, as Hive's does
        } else {
          move(moves);
        }
        committed = commitTransaction();
      } finally {
        if (!committed) {
          rollbackTransaction();  // a no-op after Hive's own rollback
        }
      }
      if (!committed) {
        throw new MetaException(ALTER_FAILED);
      }
      return null;
    });
  }

  private static Field persistenceManagerField() {
    try {
      Field field = ObjectStore.class.getDeclaredField("pm");
      field.setAccessible(true);
      return field;
    } catch (NoSuchFieldException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  private PersistenceManager persistenceManager() {
    try {
      return (PersistenceManager) PERSISTENCE_MANAGER.get(this);
    } catch (IllegalAccessException e) {
      throw new IllegalStateException(e);  // made accessible above
    }
  }

  /** Hive's failure of the write: its message, caused by the statement's error as DataNucleus
   * reports one, which the metastore's RetryingHMSHandler retries as it retries Hive's write. */
  private static MetaException alterFailed(SQLException cause) {
    MetaException failed = new MetaException(ALTER_FAILED);
    failed.initCause(new JDODataStoreException(cause.getMessage(), cause));
    return failed;
  }

  /** One partition of a direct switch: its rows, as stored, and what Hive would write over them. */
  private static final class Move {
    final long partId;
    final long sdId;
    final Partition stored;
    final Partition changed;

    Move(long partId, long sdId, Partition stored, Partition changed) {
      this.partId = partId;
      this.sdId = sdId;
      this.stored = stored;
      this.changed = changed;
    }
  }

  /**
   * The partitions of a switch that Hive's {@code alterPartitionNoTxn} would change only in their
   * location, parameters, create and last access times; null when it would change anything else
   * or fail (a missing partition, a table that is missing or a view, a partition named twice or
   * renamed or of another table): that call is left to Hive's code. Read under the write side, in
   * the transaction, so no other writer changes them before the move.
   */
  private List<Move> moves(String db, String table, List<List<String>> values, List<Partition> parts)
      throws MetaException {
    String dbName = HiveStringUtils.normalizeIdentifier(db);
    String tableName = HiveStringUtils.normalizeIdentifier(table);
    if (parts.isEmpty()) {
      return null;
    }
    for (int i = 0; i < parts.size(); i++) {
      Partition part = parts.get(i);
      if (part.getSd() == null || part.getDbName() == null || part.getTableName() == null
          || part.getValues() == null || !part.getValues().equals(values.get(i))
          || !dbName.equals(HiveStringUtils.normalizeIdentifier(part.getDbName()))
          || !tableName.equals(HiveStringUtils.normalizeIdentifier(part.getTableName()))) {
        return null;
      }
    }
    List<String> names = new ArrayList<>();
    Map<String, long[]> ids = new HashMap<>();
    JDOConnection jdo = persistenceManager().getDataStoreConnection();
    try {
      Connection connection = (Connection) jdo.getNativeConnection();
      TableKeys found = tableKeys(connection, dbName, tableName);
      // A view's partitions Hive alters without their storage descriptors.
      if (found == null || TableType.VIRTUAL_VIEW.name().equals(found.type)) {
        return null;
      }
      for (Partition part : parts) {
        if (!found.names(part.getValues())) {
          return null;
        }
        names.add(Warehouse.makePartName(found.keys, part.getValues()));  // as Hive's getMPartition looks it up
      }
      if (new HashSet<>(names).size() != names.size()) {
        return null;
      }
      partitionIds(connection, found.id, names, ids);
    } catch (SQLException e) {
      throw alterFailed(e);
    } finally {
      jdo.close();  // DataNucleus's connection stays open, in this transaction
    }
    if (ids.size() != names.size()) {
      return null;
    }
    Map<List<String>, Partition> stored = new HashMap<>();
    try {
      for (Partition old : super.getPartitionsByNames(dbName, tableName, names)) {
        stored.put(old.getValues(), old);
      }
    } catch (NoSuchObjectException e) {
      return null;  // Hive's write fails on it its own way
    }
    List<Move> moves = new ArrayList<>();
    for (int i = 0; i < parts.size(); i++) {
      Partition part = parts.get(i);
      Partition old = stored.get(part.getValues());
      if (old == null || old.getSd() == null || !onlyLocationDiffers(old.getSd(), part.getSd())) {
        return null;
      }
      long[] id = ids.get(names.get(i));
      moves.add(new Move(id[0], id[1], old, part));
    }
    return moves;
  }

  /** Refuse the switch unless the table is as its writer read it (see the class comment). */
  private void checkExpected(String db, String table) throws MetaException {
    Map<String, String> expected = EXPECTED.get();
    if (expected == null) {
      return;
    }
    String dbName = HiveStringUtils.normalizeIdentifier(db);
    String tableName = HiveStringUtils.normalizeIdentifier(table);
    String difference;
    JDOConnection jdo = persistenceManager().getDataStoreConnection();
    try {
      difference = expectedDifference((Connection) jdo.getNativeConnection(), dbName, tableName, expected);
    } catch (SQLException e) {
      throw alterFailed(e);
    } finally {
      jdo.close();
    }
    if (difference != null) {
      throw changed(dbName, tableName, difference);
    }
  }

  /** The refusal of a switch whose expectations do not hold (its message marks it as such). */
  static MetaException changed(String db, String table, String difference) {
    return new MetaException("the partitions of " + db + "." + table + " " + CHANGED + ": " + difference);
  }

  /** How the stored table differs from {@code expected}; null when it does not. */
  private static String expectedDifference(Connection connection, String db, String table,
      Map<String, String> expected) throws SQLException, MetaException {
    TableKeys found = tableKeys(connection, db, table);
    if (found == null) {
      return "the table is gone";
    }
    String revision = null;
    try (PreparedStatement query = connection.prepareStatement(
        "SELECT \"PARAM_VALUE\" FROM \"TABLE_PARAMS\" WHERE \"TBL_ID\" = ? AND \"PARAM_KEY\" = ?")) {
      query.setLong(1, found.id);
      query.setString(2, REVISION_KEY);
      try (ResultSet rows = query.executeQuery()) {
        if (rows.next()) {
          revision = rows.getString(1);
        }
      }
    }
    if (!Objects.equals(revision, expected.get(EXPECT_REVISION))) {
      return "the table's revision is " + revision + ", not " + expected.get(EXPECT_REVISION);
    }
    try (PreparedStatement query = connection.prepareStatement(
        "SELECT COUNT(*) FROM \"HIVE_LOCKS\" WHERE LOWER(\"HL_DB\") = ? AND LOWER(\"HL_TABLE\") = ?"
            + " AND \"HL_LOCK_STATE\" = 'a'")) {
      query.setString(1, db);
      query.setString(2, table);
      try (ResultSet rows = query.executeQuery()) {
        if (rows.next() && rows.getLong(1) > 0) {
          return "another writer holds the table's lock";
        }
      }
    }
    Map<String, String> inside = new HashMap<>();
    try (PreparedStatement query = connection.prepareStatement(
        "SELECT P.\"PART_NAME\", S.\"LOCATION\" FROM \"PARTITIONS\" P"
            + " JOIN \"SDS\" S ON P.\"SD_ID\" = S.\"SD_ID\" WHERE P.\"TBL_ID\" = ?")) {
      query.setLong(1, found.id);
      try (ResultSet rows = query.executeQuery()) {
        while (rows.next()) {
          if (insideSpec(found.keys, rows.getString(1), expected)) {
            inside.put(rows.getString(1), rows.getString(2));
          }
        }
      }
    }
    Map<String, String> read = new HashMap<>();
    for (Map.Entry<String, String> entry : expected.entrySet()) {
      if (entry.getKey().startsWith(EXPECT_PARTITION)) {
        read.put(entry.getKey().substring(EXPECT_PARTITION.length()), entry.getValue());
      }
    }
    return inside.equals(read) ? null : "now " + inside + ", read " + read;
  }

  /** Whether partition {@code name} has every value the expected spec names. */
  private static boolean insideSpec(List<FieldSchema> keys, String name, Map<String, String> expected)
      throws MetaException {
    List<String> values = Warehouse.makeValsFromName(name, null);
    for (int i = 0; i < keys.size() && i < values.size(); i++) {
      String wanted = expected.get(EXPECT_SPEC + keys.get(i).getName());
      if (wanted != null && !wanted.equals(values.get(i))) {
        return false;
      }
    }
    return true;
  }

  /** A table's id, type and partition keys (names only, in order). */
  private static final class TableKeys {
    final long id;
    final String type;
    final List<FieldSchema> keys = new ArrayList<>();

    TableKeys(long id, String type) {
      this.id = id;
      this.type = type;
    }

    /** Whether {@code values} name a partition: Hive's makePartName fails on any other. */
    boolean names(List<String> values) {
      return !keys.isEmpty() && values != null && values.size() == keys.size();
    }
  }

  /** The table {@code db.table} (normalized names), or null when there is none. */
  private static TableKeys tableKeys(Connection connection, String db, String table) throws SQLException {
    String sql = "SELECT T.\"TBL_ID\", T.\"TBL_TYPE\", K.\"PKEY_NAME\" FROM \"TBLS\" T"
        + " JOIN \"DBS\" D ON T.\"DB_ID\" = D.\"DB_ID\""
        + " LEFT JOIN \"PARTITION_KEYS\" K ON K.\"TBL_ID\" = T.\"TBL_ID\""
        + " WHERE D.\"NAME\" = ? AND T.\"TBL_NAME\" = ? ORDER BY K.\"INTEGER_IDX\"";
    TableKeys found = null;
    try (PreparedStatement query = connection.prepareStatement(sql)) {
      query.setString(1, db);
      query.setString(2, table);
      try (ResultSet rows = query.executeQuery()) {
        while (rows.next()) {
          if (found == null) {
            found = new TableKeys(rows.getLong(1), rows.getString(2));
          }
          if (rows.getString(3) != null) {
            found.keys.add(new FieldSchema(rows.getString(3), null, null));
          }
        }
      }
    }
    return found;
  }

  /** PART_ID and SD_ID of the partitions {@code names} of the table that exist, by name. */
  private static void partitionIds(Connection connection, long tableId, List<String> names, Map<String, long[]> ids)
      throws SQLException {
    int batch = 500;  // bind variables per statement, far below Derby's limits
    for (int from = 0; from < names.size(); from += batch) {
      List<String> some = names.subList(from, Math.min(names.size(), from + batch));
      String sql = "SELECT \"PART_NAME\", \"PART_ID\", \"SD_ID\" FROM \"PARTITIONS\" WHERE \"TBL_ID\" = ?"
          + " AND \"PART_NAME\" IN (" + String.join(", ", Collections.nCopies(some.size(), "?")) + ")";
      try (PreparedStatement query = connection.prepareStatement(sql)) {
        query.setLong(1, tableId);
        for (int i = 0; i < some.size(); i++) {
          query.setString(i + 2, some.get(i));
        }
        try (ResultSet rows = query.executeQuery()) {
          while (rows.next()) {
            ids.put(rows.getString(1), new long[] {rows.getLong(2), rows.getLong(3)});
          }
        }
      }
    }
  }

  /**
   * Whether Hive's copy of {@code changed} over {@code stored} ({@code ObjectStore.copyMSD}, which
   * sets every field below) changes nothing but the location. A missing collection is stored as an
   * empty one; skewed values are stored as new rows even when equal, so any skew goes to Hive.
   */
  private static boolean onlyLocationDiffers(StorageDescriptor stored, StorageDescriptor changed) {
    SerDeInfo storedSerde = stored.getSerdeInfo();
    SerDeInfo changedSerde = changed.getSerdeInfo();
    return storedSerde != null && changedSerde != null  // Hive fails on a missing one
        && stored.getCols() != null && stored.getCols().equals(changed.getCols())
        && Objects.equals(stored.getInputFormat(), changed.getInputFormat())
        && Objects.equals(stored.getOutputFormat(), changed.getOutputFormat())
        && stored.isCompressed() == changed.isCompressed()
        && stored.getNumBuckets() == changed.getNumBuckets()
        && stored.isStoredAsSubDirectories() == changed.isStoredAsSubDirectories()
        && orEmpty(stored.getBucketCols()).equals(orEmpty(changed.getBucketCols()))
        && orEmpty(stored.getSortCols()).equals(orEmpty(changed.getSortCols()))
        && orEmpty(stored.getParameters()).equals(orEmpty(changed.getParameters()))
        && Objects.equals(storedSerde.getName(), changedSerde.getName())
        && Objects.equals(storedSerde.getSerializationLib(), changedSerde.getSerializationLib())
        && orEmpty(storedSerde.getParameters()).equals(orEmpty(changedSerde.getParameters()))
        && unskewed(stored.getSkewedInfo()) && unskewed(changed.getSkewedInfo());
  }

  private static boolean unskewed(SkewedInfo skew) {
    return skew == null || (orEmpty(skew.getSkewedColNames()).isEmpty()
        && orEmpty(skew.getSkewedColValues()).isEmpty()
        && orEmpty(skew.getSkewedColValueLocationMaps()).isEmpty());
  }

  private static <T> List<T> orEmpty(List<T> list) {
    return list == null ? Collections.emptyList() : list;
  }

  private static <K, V> Map<K, V> orEmpty(Map<K, V> map) {
    return map == null ? Collections.emptyMap() : map;
  }

  /**
   * What Hive's write leaves in the rows of {@code moves}: each storage descriptor's location, the
   * partition's parameters (replaced whole) and, where they differ, its create and last access
   * times. Everything else Hive would write is equal to what is stored (see {@link #moves}).
   */
  private void move(List<Move> moves) throws MetaException {
    PersistenceManager pm = persistenceManager();
    pm.flush();  // JDO changes made earlier in this transaction reach the database before these
    JDOConnection jdo = pm.getDataStoreConnection();
    try {
      Connection connection = (Connection) jdo.getNativeConnection();
      try (PreparedStatement location = connection.prepareStatement(
               "UPDATE \"SDS\" SET \"LOCATION\" = ? WHERE \"SD_ID\" = ?");
           PreparedStatement times = connection.prepareStatement(
               "UPDATE \"PARTITIONS\" SET \"CREATE_TIME\" = ?, \"LAST_ACCESS_TIME\" = ? WHERE \"PART_ID\" = ?");
           PreparedStatement clear = connection.prepareStatement(
               "DELETE FROM \"PARTITION_PARAMS\" WHERE \"PART_ID\" = ?");
           PreparedStatement insert = connection.prepareStatement(
               "INSERT INTO \"PARTITION_PARAMS\" (\"PART_ID\", \"PARAM_KEY\", \"PARAM_VALUE\") VALUES (?, ?, ?)")) {
        int retimed = 0;
        for (Move move : moves) {
          location.setString(1, move.changed.getSd().getLocation());
          location.setLong(2, move.sdId);
          location.addBatch();
          if (move.changed.getCreateTime() != move.stored.getCreateTime()
              || move.changed.getLastAccessTime() != move.stored.getLastAccessTime()) {
            times.setInt(1, move.changed.getCreateTime());
            times.setInt(2, move.changed.getLastAccessTime());
            times.setLong(3, move.partId);
            times.addBatch();
            retimed++;
          }
          clear.setLong(1, move.partId);
          clear.addBatch();
          for (Map.Entry<String, String> param : orEmpty(move.changed.getParameters()).entrySet()) {
            insert.setLong(1, move.partId);
            insert.setString(2, param.getKey());
            insert.setString(3, param.getValue());
            insert.addBatch();
          }
        }
        expectOneRowEach(location.executeBatch());
        if (retimed > 0) {
          expectOneRowEach(times.executeBatch());
        }
        clear.executeBatch();
        insert.executeBatch();
      }
    } catch (SQLException e) {
      throw alterFailed(e);
    } finally {
      jdo.close();
    }
    // No cached copy of these objects may outlive the rows they were read from.
    pm.evictAll(false, MPartition.class);
    pm.evictAll(false, MStorageDescriptor.class);
    pm.getPersistenceManagerFactory().getDataStoreCache().evictAll(false, MPartition.class);
    pm.getPersistenceManagerFactory().getDataStoreCache().evictAll(false, MStorageDescriptor.class);
  }

  private static void expectOneRowEach(int[] counts) throws SQLException {
    for (int count : counts) {
      if (count != 1) {  // the rows were read under the write side: only a bug gets here
        throw new SQLException("a direct partition write changed " + count + " rows, not 1");
      }
    }
  }

  @Override
  public void alterPartition(String db, String table, List<String> values, Partition part)
      throws InvalidObjectException, MetaException {
    write(() -> {
      super.alterPartition(db, table, values, part);
      return null;
    });
  }

  @Override
  public boolean addPartitions(String db, String table, List<Partition> parts)
      throws InvalidObjectException, MetaException {
    return write(() -> super.addPartitions(db, table, parts));
  }

  @Override
  public boolean addPartitions(String db, String table, PartitionSpecProxy parts, boolean ifNotExists)
      throws InvalidObjectException, MetaException {
    return write(() -> super.addPartitions(db, table, parts, ifNotExists));
  }

  @Override
  public boolean addPartition(Partition part) throws InvalidObjectException, MetaException {
    return write(() -> super.addPartition(part));
  }

  @Override
  public boolean dropPartition(String db, String table, List<String> values)
      throws MetaException, NoSuchObjectException, InvalidObjectException, InvalidInputException {
    return write(() -> super.dropPartition(db, table, values));
  }

  @Override
  public void dropPartitions(String db, String table, List<String> names)
      throws MetaException, NoSuchObjectException {
    write(() -> {
      super.dropPartitions(db, table, names);
      return null;
    });
  }

  /**
   * A compare-and-set alter's first write (HIVE-26882), before alterTable in its transaction. Not an
   * {@code @Override}: Hive 2.3.9 (pyspark 3.5's jars) has no such method and never calls this one.
   */
  public long updateParameterWithExpectedValue(Table table, String key, String expected, String value)
      throws MetaException, NoSuchObjectException {
    return write(() -> {
      try {
        return (long) SUPER_UPDATE_PARAMETER_WITH_EXPECTED_VALUE.invokeExact(this, table, key, expected, value);
      } catch (Error | Exception e) {
        throw e;
      } catch (Throwable t) {
        throw new UndeclaredThrowableException(t);
      }
    });
  }

  @Override
  public void alterTable(String db, String table, Table changed) throws InvalidObjectException, MetaException {
    write(() -> {
      super.alterTable(db, table, changed);
      return null;
    });
  }

  @Override
  public boolean dropTable(String db, String table)
      throws MetaException, NoSuchObjectException, InvalidObjectException, InvalidInputException {
    return write(() -> super.dropTable(db, table));
  }

  @Override
  public boolean commitTransaction() {
    try {
      return super.commitTransaction();
    } finally {
      releaseSwitchIfDone();
    }
  }

  @Override
  public void rollbackTransaction() {
    try {
      super.rollbackTransaction();
    } finally {
      releaseSwitchIfDone();
    }
  }

  @Override
  public Table getTable(String db, String table) throws MetaException {
    return read(() -> super.getTable(db, table));
  }

  @Override
  public List<Partition> getPartitions(String db, String table, int max)
      throws MetaException, NoSuchObjectException {
    return read(() -> super.getPartitions(db, table, max));
  }

  @Override
  public List<Partition> getPartitionsWithAuth(String db, String table, short max, String user, List<String> groups)
      throws MetaException, InvalidObjectException {
    return read(() -> super.getPartitionsWithAuth(db, table, max, user, groups));
  }

  @Override
  public List<Partition> listPartitionsPsWithAuth(String db, String table, List<String> values, short max,
      String user, List<String> groups) throws MetaException, InvalidObjectException, NoSuchObjectException {
    return read(() -> super.listPartitionsPsWithAuth(db, table, values, max, user, groups));
  }

  @Override
  public List<Partition> getPartitionsByNames(String db, String table, List<String> names)
      throws MetaException, NoSuchObjectException {
    return read(() -> super.getPartitionsByNames(db, table, names));
  }

  @Override
  public List<Partition> getPartitionsByFilter(String db, String table, String filter, short max)
      throws MetaException, NoSuchObjectException {
    return read(() -> super.getPartitionsByFilter(db, table, filter, max));
  }

  @Override
  public boolean getPartitionsByExpr(String db, String table, byte[] expr, String defaultPartitionName,
      short max, List<Partition> result) throws TException {
    return read(() -> super.getPartitionsByExpr(db, table, expr, defaultPartitionName, max, result));
  }
}
