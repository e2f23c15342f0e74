"""Launch the orin-llm planner node with its parameters file."""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    default_params = PathJoinSubstitution(
        [FindPackageShare('orin_llm_ros'), 'config', 'planner.params.yaml'])
    return LaunchDescription([
        DeclareLaunchArgument(
            'params_file', default_value=default_params,
            description='Parameters of the planner node (socket_path, timeout_s, ...)'),
        DeclareLaunchArgument(
            'namespace', default_value='',
            description='Namespace of the node and its /plan action'),
        Node(
            package='orin_llm_ros',
            executable='planner_node',
            name='orin_llm_planner',
            namespace=LaunchConfiguration('namespace'),
            output='screen',
            emulate_tty=True,
            parameters=[LaunchConfiguration('params_file')],
        ),
    ])
