from glob import glob

from setuptools import find_packages, setup

package_name = 'orin_llm_ros'

setup(
    name=package_name,
    version='0.2.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.py')),
        ('share/' + package_name + '/config', glob('config/*.yaml')),
    ],
    # nothing beyond the standard library and package.xml's rosdep keys
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='orin-llm maintainers',
    maintainer_email='robotics@example.com',
    description='ROS 2 planner node in front of the orin-llm planning daemon',
    license='Apache-2.0',
    tests_require=['pytest'],
    entry_points={
        'console_scripts': [
            'planner_node = orin_llm_ros.planner_node:main',
            'plan_client = orin_llm_ros.plan_client:main',
        ],
    },
)
